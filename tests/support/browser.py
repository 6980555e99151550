"""A real Chromium driven by Playwright (async API), or a loud skip when there is none: the
browser fixtures of every page test (registered by the root conftest.py), and the one tab each
test process lends its page tests in turn (`lent_page`)."""

from __future__ import annotations

import os
import warnings
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

import pytest
import pytest_asyncio
from playwright.async_api import (
    Browser,
    BrowserContext,
    Frame,
    Page,
    ViewportSize,
    async_playwright,
    expect,
)

#: The marks of every browser test module: its tests run on the session's event loop, where
#: the process's one Chromium lives (`browser`).
BROWSER_TESTS = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="session")]

CHROMIUM = Path("/usr/bin/chromium")
#: How long an `expect` waits for the page to show what it should (Playwright's own default is
#: 5 s): a wait on a condition, so an idle machine is not slowed; a loaded one, where the
#: gateway, the demo model and Chromium share two cores with other runs, gets room.
EXPECT_TIMEOUT_MS = 20_000
expect.set_options(timeout=EXPECT_TIMEOUT_MS)

CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]


def require_browser() -> None:
    """Skip (with a warning) when Chromium is missing; fail instead in CI."""
    if CHROMIUM.exists():
        return
    reason = f"{CHROMIUM} not found: the browser test did NOT run (scripts/test installs it)"
    if os.environ.get("CHATGATE_REQUIRE_BROWSER") == "1":
        pytest.fail(reason + "; CHATGATE_REQUIRE_BROWSER=1 makes this a failure")
    warnings.warn(reason, stacklevel=1)
    pytest.skip(reason)


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def browser() -> AsyncIterator[Browser]:
    """One Chromium per test process (a launch costs about 3 s of CPU), on the session's
    event loop, where every browser test runs (BROWSER_TESTS); each test has a page that
    holds nothing of another test's (`lent_page`): no cookies, storage, cache or routes."""
    require_browser()
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=CHROMIUM_ARGS
        )
        yield launched
        await launched.close()


#: Playwright's own size for a page of a context made without one.
DEFAULT_VIEWPORT = ViewportSize(width=1280, height=720)
#: Events Playwright itself listens to on every page; any other listener is a test's.
_OWN_EVENTS = {"close", "crash", "framenavigated"}


@dataclass
class _Tab:
    """A context with its one page, and the origins the page has been on (whose storage a
    wipe clears)."""

    context: BrowserContext
    page: Page
    origins: set[str] = field(default_factory=set)

    def note_origin(self, frame: Frame) -> None:
        parts = urlsplit(frame.url)
        if parts.scheme in ("http", "https"):
            self.origins.add(f"{parts.scheme}://{parts.netloc}")


#: The tab each browser lends, between two tests.
_spare: dict[Browser, _Tab] = {}


async def _open_tab(browser: Browser) -> _Tab:
    context = await browser.new_context()
    tab = _Tab(context, await context.new_page())
    tab.page.on("framenavigated", tab.note_origin)
    return tab


async def _wipe(tab: _Tab) -> bool:
    """Leave the tab as a new context's page would be: on about:blank, online, with no routes,
    permissions, cookies, cache or storage of the test before. False (the tab is then closed)
    when a test's own listener is still on the page or the page is gone."""
    page, context = tab.page, tab.context
    if page.is_closed() or set(page._impl_obj.event_names()) - _OWN_EVENTS:
        return False
    await page.unroute_all(behavior="ignoreErrors")
    await context.unroute_all(behavior="ignoreErrors")
    await context.set_offline(False)
    await context.clear_permissions()
    await page.goto("about:blank")
    cdp = await context.new_cdp_session(page)
    try:
        await cdp.send("Network.clearBrowserCache")
        for origin in tab.origins:
            await cdp.send("Storage.clearDataForOrigin", {"origin": origin, "storageTypes": "all"})
    finally:
        await cdp.detach()
    await context.clear_cookies()
    tab.origins.clear()
    return True


@asynccontextmanager
async def lent_page(
    browser: Browser, *, viewport: ViewportSize = DEFAULT_VIEWPORT,
    color_scheme: Literal["light", "dark"] = "light", permissions: list[str] | None = None,
) -> AsyncIterator[Page]:
    """A page for one test, of that size, in a system of that colour scheme. A new context's
    first page costs Chromium a renderer process (half a second of CPU; the page tests open
    about a hundred), so each test process keeps one tab and lends it: wiped after each test
    (`_wipe`) and closed instead when the test raised, the wipe failed, or a listener the test
    added is still on it."""
    tab = _spare.pop(browser, None) or await _open_tab(browser)
    await tab.page.set_viewport_size(viewport)
    await tab.page.emulate_media(color_scheme=color_scheme)
    if permissions:
        await tab.context.grant_permissions(permissions)
    kept = False
    try:
        yield tab.page
        kept = await _wipe(tab)
    finally:
        if kept:
            _spare[browser] = tab
        else:
            await tab.context.close()


@pytest_asyncio.fixture(loop_scope="session")
async def page(browser: Browser) -> AsyncIterator[Page]:
    """A page of its own (`lent_page`); uncaught page errors fail the test that owns it."""
    errors: list[str] = []

    def record(error: Exception) -> None:
        errors.append(str(error))

    async with lent_page(browser) as new_page:
        new_page.on("pageerror", record)
        yield new_page
        new_page.remove_listener("pageerror", record)
    assert errors == [], f"uncaught errors in the page: {errors}"
