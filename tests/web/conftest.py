"""A real Chromium driven by Playwright (async API), or a loud skip when there is none."""

from __future__ import annotations

import os
import warnings
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio
from playwright.async_api import Browser, Page, async_playwright, expect

from tests.support.gateway import DemoLlm, GatewayPool, LiveGateway, StartGatewayProcess
from tests.web.page_helpers import AUTH_OFF

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


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def browser() -> AsyncIterator[Browser]:
    """One Chromium per test module (a launch costs about a second), on the module's event
    loop (page_helpers.BROWSER_TESTS); each test has contexts of its own (`page`,
    `sized_page`), which share no cookies, storage or cache."""
    require_browser()
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=CHROMIUM_ARGS
        )
        yield launched
        await launched.close()


@pytest_asyncio.fixture(loop_scope="module")
async def page(browser: Browser) -> AsyncIterator[Page]:
    """A fresh page; uncaught page errors fail the test that owns the page."""
    context = await browser.new_context()
    new_page = await context.new_page()
    errors: list[str] = []
    new_page.on("pageerror", lambda error: errors.append(str(error)))
    yield new_page
    await context.close()
    assert errors == [], f"uncaught errors in the page: {errors}"


@pytest.fixture(scope="module")
def module_gateways(live_log_dir: Path) -> Iterator[GatewayPool]:
    """Starts the gateway processes a module's tests share; stops them, and drops their
    databases, after the module's last test (pytest-xdist's `--dist loadscope` keeps a module
    on one worker)."""
    with GatewayPool(live_log_dir) as pool:
        yield pool


@pytest.fixture(scope="module")
def web_gateway(module_gateways: GatewayPool, demo_llm: DemoLlm) -> LiveGateway:
    """The module's gateway subprocess (SQLite, auth off) on the fast demo model (which
    thinks at its own pace, 30 ms a piece). Not in process: served from the test process, a
    turn sent right after "New thread" can finish before the page's history load, which then
    wipes the live bubble.

    Shared by the module's tests, as a process costs about a second of CPU to start: each
    test makes threads of its own ("New thread", store_answers) and looks at those alone. A
    test that reads the whole thread list (its count, its only item) or the state before any
    thread takes `fresh_gateway`."""
    return module_gateways.start_process("sqlite", upstream=demo_llm, env=AUTH_OFF)


@pytest.fixture
def fresh_gateway(start_gateway_process: StartGatewayProcess, demo_llm: DemoLlm
                  ) -> LiveGateway:
    """web_gateway, but of this test alone: a fresh, empty database."""
    return start_gateway_process("sqlite", upstream=demo_llm, env=AUTH_OFF)


@pytest.fixture
def gateway_url(web_gateway: LiveGateway) -> str:
    """web_gateway's address."""
    return web_gateway.url


@pytest.fixture(scope="module")
def slow_gateway(module_gateways: GatewayPool, slow_demo_llm: DemoLlm) -> LiveGateway:
    """Like web_gateway (shared by the module's tests), on the 10 ms-a-delta demo server (a
    [long] answer takes seconds)."""
    return module_gateways.start_process("sqlite", upstream=slow_demo_llm, env=AUTH_OFF)


@pytest.fixture
def slow_gateway_url(slow_gateway: LiveGateway) -> str:
    """slow_gateway's address."""
    return slow_gateway.url
