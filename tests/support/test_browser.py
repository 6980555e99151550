"""The lent tab (tests/support/browser.py `lent_page`): a page test gets the tab the test
before it used, and finds nothing of that test in it; a tab a test may have left in a state
the wipe cannot see into is closed instead of lent again."""

from __future__ import annotations

import pytest
from playwright.async_api import Browser, Page, ViewportSize

from tests.support.browser import BROWSER_TESTS, DEFAULT_VIEWPORT, lent_page
from tests.support.scripted_upstream import scripted_upstream

pytestmark = BROWSER_TESTS

STATE = """() => [localStorage.length, sessionStorage.length, document.cookie,
                  matchMedia('(prefers-color-scheme: dark)').matches]"""
LEAVE_STATE = """() => { localStorage.setItem('key', 'sk-1'); sessionStorage.setItem('s', '1');
                         document.cookie = 'c=1; max-age=3600'; }"""
CLIPBOARD = "() => navigator.permissions.query({name: 'clipboard-read'}).then(p => p.state)"
#: An origin to keep storage in: a loopback server answering every request with a blank page
#: that the cache may keep.
BLANK = b"<!doctype html><title>blank</title>"


async def test_the_next_test_gets_the_same_tab_with_nothing_of_the_test_before(
    browser: Browser
) -> None:
    async with scripted_upstream(BLANK, content_type="text/html",
                                 headers={"Cache-Control": "max-age=3600"}) as site:
        async with lent_page(browser, viewport=ViewportSize(width=390, height=844),
                             color_scheme="dark", permissions=["clipboard-read"]) as page:
            first = page
            await page.goto(site)
            await page.evaluate(LEAVE_STATE)
            assert await page.evaluate(STATE) == [1, 1, "c=1", True]
            assert await page.evaluate(CLIPBOARD) == "granted"
            await page.route("**/*", lambda route: route.abort())
            await page.context.set_offline(True)

        async with lent_page(browser) as page:
            assert page is first
            assert page.url == "about:blank"
            await page.goto(site)  # neither routed away nor offline
            assert await page.evaluate(STATE) == [0, 0, "", False]
            assert await page.evaluate(CLIPBOARD) == "prompt"
            assert page.viewport_size == DEFAULT_VIEWPORT


async def test_a_tab_with_a_listener_the_test_left_is_not_lent_again(browser: Browser) -> None:
    async with lent_page(browser) as page:
        first = page
        page.once("dialog", lambda dialog: dialog.accept())  # no dialog comes
    assert first.is_closed()
    async with lent_page(browser) as page:
        assert page is not first


async def test_a_tab_whose_test_raised_is_not_lent_again(browser: Browser) -> None:
    first: Page | None = None
    with pytest.raises(AssertionError):
        async with lent_page(browser) as page:
            first = page
            raise AssertionError("the test failed")
    assert first is not None and first.is_closed()
    async with lent_page(browser) as page:
        assert page is not first
