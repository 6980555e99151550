"""The page in a real Chromium against a real gateway and the real demo model server:
what streams in, and what a reload shows, is the same clean text, with no marker residue."""

from __future__ import annotations

from playwright.async_api import Page, expect

from app.demo_llm.scenarios import HTML_ANSWER, ChatInput, long_answer_text, plan_reply
from tests.web.page_helpers import BROWSER_TESTS
from tests.web.visible_text import without_list_markers

pytestmark = BROWSER_TESTS

#: Locator-based waits: the page's CSP forbids eval, which wait_for_function() relies on.
TURN_OVER = "body[data-turn=idle] .message.assistant:not(.streaming)"
STREAMING = ".message.assistant.streaming"


def seed_bug_visible_text(user_text: str) -> str:
    """What the marker spec leaves of the [seed-bug] answer: the prose after the METADATA JSON."""
    emitted = plan_reply(ChatInput(system="", user_text=user_text)).text
    return emitted[emitted.index("Aha, chápu."):].strip()


def rendered(markdown: str) -> str:
    """The answer's innerText once rendered: its list bullets are drawn, not text."""
    return without_list_markers(markdown)


async def send(page: Page, text: str) -> None:
    await page.fill("#message-input", text)
    await page.click("#send")
    await wait_turn_over(page)


async def wait_turn_over(page: Page) -> None:
    await expect(page.locator(TURN_OVER)).to_have_count(1, timeout=30_000)
    await expect(page.locator(STREAMING)).to_have_count(0)


async def page_text(page: Page) -> str:
    """document.body.innerText: what a user can read (and copy) on the page."""
    return await page.locator("body").inner_text()


async def test_seed_bug_answer_is_clean_live_and_after_reload(page: Page, gateway_url: str) -> None:
    question = "[seed-bug] Jak se máš?"
    expected = rendered(seed_bug_visible_text(question))
    await page.goto(gateway_url + "/")
    await page.click("#new-thread")
    await expect(page.locator(".thread-item.active")).to_have_count(1)
    await send(page, question)

    answer = page.locator(".message.assistant .content")
    await expect(answer).to_have_count(1)
    assert await answer.inner_text() == expected
    await expect(page.locator(".message.assistant .status")).to_have_count(0)
    live = await page_text(page)
    assert "<!--" not in live and "METADATA" not in live and "MSG_CONTEXT" not in live
    thread_id = await page.locator(".thread-item.active").get_attribute("data-thread-id")

    await page.reload()
    await page.click(f'.thread-item[data-thread-id="{thread_id}"]')
    await expect(page.locator(".message.user .content")).to_have_text(question)
    reloaded = page.locator(".message.assistant .content")
    await expect(reloaded).to_have_count(1)
    assert await reloaded.inner_text() == expected
    after = await page_text(page)
    assert "<!--" not in after and "METADATA" not in after


async def test_markup_in_model_output_is_shown_as_text_not_run(
    page: Page, gateway_url: str
) -> None:
    await page.goto(gateway_url + "/")
    await page.click("#new-thread")
    await send(page, "[html] show me markup")
    answer = page.locator(".message.assistant .content")
    assert await answer.inner_text() == HTML_ANSWER
    assert await page.locator(".message.assistant b, .message.assistant img, "
                              ".message.assistant script").count() == 0
    assert await page.evaluate("window.__demoXss === undefined")


async def test_stop_keeps_the_partial_answer_as_stopped(
    page: Page, slow_gateway_url: str
) -> None:
    await page.goto(slow_gateway_url + "/")
    await page.click("#new-thread")
    await page.fill("#message-input", "[long] tell me everything")
    await page.click("#send")
    await expect(page.locator(".message.assistant .content")).to_contain_text("Line 03")
    await page.click("#stop")
    await wait_turn_over(page)
    shown = await page.locator(".message.assistant .content").inner_text()
    assert shown and long_answer_text().startswith(shown)
    # What the page shows once stopped is the stored row, so a reload says the same.
    await expect(page.locator(".message.assistant .status")).to_have_text("stopped")
    thread_id = await page.locator(".thread-item.active").get_attribute("data-thread-id")

    await page.reload()
    await page.click(f'.thread-item[data-thread-id="{thread_id}"]')
    stored = page.locator(".message.assistant .content")
    await expect(stored).to_have_count(1)
    stored_text = await stored.inner_text()
    assert stored_text.startswith(shown) and long_answer_text().startswith(stored_text)
    assert len(stored_text) < len(long_answer_text())
    await expect(page.locator(".message.assistant .status")).to_have_text("stopped")


async def test_usage_footer_names_only_unusual_sources(page: Page, gateway_url: str) -> None:
    """The provider's own count is the normal case and goes unsaid; an estimate says so."""
    await page.goto(gateway_url + "/")
    await page.click("#new-thread")
    await send(page, "Hello")
    usage = page.locator(".message.assistant .usage")
    await expect(usage).to_have_count(1)
    assert (await usage.inner_text()).endswith(" tokens")
    await send_again(page, "[no-usage] Hello again")
    await expect(usage).to_have_count(2)
    assert (await usage.nth(1).inner_text()).endswith(" · estimated")


async def send_again(page: Page, text: str) -> None:
    """A second turn in the same thread: wait until its answer, too, is over."""
    before = await page.locator(TURN_OVER).count()
    await page.fill("#message-input", text)
    await page.click("#send")
    await expect(page.locator(TURN_OVER)).to_have_count(before + 1, timeout=30_000)
    await expect(page.locator(STREAMING)).to_have_count(0)
