"""The page survives a dropped connection: taken offline mid-answer and back online, it
reconnects by itself (Last-Event-ID) and finishes the answer, with no text shown twice and
none missing, live and after the reload."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.async_api import Browser, BrowserContext, Locator, Page, expect

from app.demo_llm.scenarios import long_answer_text
from tests.support.gateway import DemoLlm, GatewayPool, start_demo_llm
from tests.web.page_helpers import BROWSER_TESTS, active_thread_id
from tests.web.test_page import wait_turn_over

pytestmark = BROWSER_TESTS

#: Every text the answer bubble showed, recorded in the page as it changed.
RECORD_LIVE_TEXT = """() => {
  window.__liveTexts = [];
  const box = document.getElementById("messages");
  new MutationObserver(() => {
    const node = document.querySelector(".message.assistant .content");
    if (node) window.__liveTexts.push(node.innerText);
  }).observe(box, { childList: true, subtree: true, characterData: true });
}"""


@pytest.fixture(scope="module")
def brisk_demo_llm() -> Iterator[DemoLlm]:
    """4 ms a delta: the long answer streams for about four seconds, time enough to drop,
    reload or stop in the middle of it."""
    demo = start_demo_llm(delay_ms=4, slow_first_s=2.0)
    yield demo
    demo.stop()


@pytest.fixture(scope="module")
def resumable_gateway_url(module_gateways: GatewayPool, brisk_demo_llm: DemoLlm) -> str:
    """The module's gateway with a resume grace, shared: each test asks in a thread of its
    own and opens that thread again by its id."""
    gateway = module_gateways.start_process("sqlite", upstream=brisk_demo_llm, env={
        "CHATGATE_AUTH_MODE": "off", "CHATGATE_RESUME_GRACE_S": "30"})
    return gateway.url


async def test_the_page_finishes_an_answer_across_a_dropped_connection(
    browser: Browser, resumable_gateway_url: str
) -> None:
    context = await browser.new_context()
    page = await context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    try:
        await offline_and_back(page, context, resumable_gateway_url)
    finally:
        await context.close()
    assert errors == []


async def offline_and_back(page: Page, context: BrowserContext, url: str) -> None:
    full = long_answer_text()
    await page.goto(url + "/")
    await page.evaluate(RECORD_LIVE_TEXT)
    answer = await start_long_answer(page)
    await context.set_offline(True)
    await expect(page.locator("#notice")).to_have_text("Connection lost; reconnecting…")
    await context.set_offline(False)
    await wait_turn_over(page)
    assert await answer.inner_text() == full
    await expect(page.locator(".message.assistant .status")).to_have_count(0)  # complete
    await expect(page.locator("#notice")).to_have_text("")
    live: list[str] = await page.evaluate("window.__liveTexts")
    assert live and all(full.startswith(text) for text in live)  # nothing twice or skipped
    thread = await thread_item(page)
    await page.reload()
    await page.click(thread)
    await expect(page.locator(".message.assistant .content")).to_have_text(full)


async def thread_item(page: Page) -> str:
    """The open thread's item in the list: what a test clicks to open it again after a
    reload, whatever other threads the module's gateway holds."""
    return f'.thread-item[data-thread-id="{await active_thread_id(page)}"]'


async def start_long_answer(page: Page) -> Locator:
    """Ask for the long demo answer in a new thread; its bubble, once a few lines are in."""
    await page.click("#new-thread")
    await page.fill("#message-input", "[long] tell me everything")
    await page.click("#send")
    answer = page.locator(".message.assistant .content")
    await expect(answer).to_contain_text("Line 03")
    return answer


async def test_stop_ends_the_answer_at_once_despite_the_grace(
    page: Page, resumable_gateway_url: str
) -> None:
    """Stop asks the gateway to end the turn: with a 30 s grace, a page that only hung up
    would leave the answer streaming on, and its bubble would not settle as `stopped`."""
    await page.goto(resumable_gateway_url + "/")
    answer = await start_long_answer(page)
    await page.click("#stop")
    await wait_turn_over(page)
    await expect(page.locator(".message.assistant .status")).to_have_text("stopped")
    shown = await answer.inner_text()
    assert shown and len(shown) < len(long_answer_text())
    thread = await thread_item(page)
    await page.reload()
    await page.click(thread)
    await expect(page.locator(".message.assistant .content")).to_have_text(shown)
    await expect(page.locator(".message.assistant .status")).to_have_text("stopped")


async def test_a_reload_mid_answer_follows_the_answer_to_its_end(
    page: Page, resumable_gateway_url: str
) -> None:
    """A reload is a dropped connection too: the page reads the thread, finds its answer
    still streaming, and follows it to the end from its first delta, in the one bubble."""
    await page.goto(resumable_gateway_url + "/")
    answer = await start_long_answer(page)
    thread = await thread_item(page)
    await page.reload()
    await page.evaluate(RECORD_LIVE_TEXT)
    await page.click(thread)
    await wait_turn_over(page)
    full = long_answer_text()
    await expect(answer).to_have_text(full)
    live: list[str] = await page.evaluate("window.__liveTexts")
    assert all(full.startswith(text) for text in live)  # nothing twice or out of order
    # followed as it streamed, not only shown once stored
    assert len({text for text in live if 0 < len(text) < len(full)}) >= 3
    await expect(page.locator(".message.assistant")).to_have_count(1)
    await expect(page.locator(".message.assistant .status")).to_have_count(0)  # complete
    await expect(page.locator(".message.user")).to_have_count(1)
