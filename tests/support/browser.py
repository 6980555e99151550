"""A real Chromium driven by Playwright (async API), or a loud skip when there is none: the
browser fixtures of every page test (registered by the root conftest.py)."""

from __future__ import annotations

import os
import warnings
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from playwright.async_api import Browser, Page, async_playwright, expect

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
    event loop, where every browser test runs (BROWSER_TESTS); each test has contexts of its
    own (`page`, `sized_page`), which share no cookies, storage or cache."""
    require_browser()
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=CHROMIUM_ARGS
        )
        yield launched
        await launched.close()


@pytest_asyncio.fixture(loop_scope="session")
async def page(browser: Browser) -> AsyncIterator[Page]:
    """A fresh page; uncaught page errors fail the test that owns the page."""
    context = await browser.new_context()
    new_page = await context.new_page()
    errors: list[str] = []
    new_page.on("pageerror", lambda error: errors.append(str(error)))
    yield new_page
    await context.close()
    assert errors == [], f"uncaught errors in the page: {errors}"
