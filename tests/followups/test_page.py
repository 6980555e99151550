"""The page in a real Chromium: with autonomy on and a short idle time, the assistant's
follow-up appears on its own (pushed over /events, no reload), and neither the live page nor a
reload ever shows the synthetic prompt."""

from __future__ import annotations

from playwright.async_api import Page, expect

from app.followups.triggers import TRIGGER_PROMPTS
from tests.followups.helpers import FAST_ENV
from tests.support.gateway import DemoLlm, StartGateway
from tests.web.page_helpers import BROWSER_TESTS

pytestmark = BROWSER_TESTS
AUTONOMY_ON = {**FAST_ENV, "CHATGATE_AUTH_MODE": "off", "CHATGATE_AUTONOMY_ENABLED": "true",
               "CHATGATE_AUTONOMY_IDLE_SECONDS": "1", "CHATGATE_AUTONOMY_MAX_FOLLOWUPS": "1"}
PROMPT = TRIGGER_PROMPTS["question_unanswered"]


async def test_the_page_shows_a_followup_as_it_arrives(
    start_gateway: StartGateway, demo_llm: DemoLlm, page: Page
) -> None:
    # The gateway is set up before the page, so the page (and its open /events stream) is
    # closed before the gateway stops.
    gateway = start_gateway("sqlite", upstream=demo_llm, env=AUTONOMY_ON)
    await page.goto(gateway.url + "/")
    await page.click("#new-thread")
    await expect(page.locator(".thread-item.active")).to_have_count(1)
    await page.fill("#message-input", "[awaiting:question] Shall we talk about tides?")
    await page.click("#send")
    await expect(page.locator("body[data-turn=idle] .message.assistant:not(.streaming)")
                 ).to_have_count(1, timeout=30_000)

    # Nobody types: the follow-up arrives by itself after the idle second. That second
    # passes on the real clock here: moved on by hand, the follow-up can land while the page
    # is still settling after the answer, which no user can bring about (idle is >= 1 s).
    await expect(page.locator(".message.assistant")).to_have_count(2, timeout=15_000)
    await expect(page.locator(".message.user")).to_have_count(1)
    followup = page.locator(".message.assistant .content").nth(1)
    assert (await followup.inner_text()).strip()
    assert PROMPT not in await page.locator("body").inner_text()

    thread_id = await page.locator(".thread-item.active").get_attribute("data-thread-id")
    await page.reload()
    await page.click(f'.thread-item[data-thread-id="{thread_id}"]')
    await expect(page.locator(".message.assistant")).to_have_count(2)
    await expect(page.locator(".message.user")).to_have_count(1)
    assert PROMPT not in await page.locator("body").inner_text()
