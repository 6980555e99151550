"""What a new user meets in the first minutes, in Chromium at both sizes: "+ New thread"
stores nothing until its first message (a refused first send leaves no empty thread behind),
an answer that was all unfinished thinking says so, and the demo model's `[code]` answer
shows two code blocks, each with its Copy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.async_api import Browser, expect

from app.demo_llm.scenarios import CODE_ANSWER
from tests.support.gateway import LiveGateway
from tests.web.page_helpers import (
    BROWSER_TESTS,
    VIEWPORTS,
    Viewport,
    active_thread_id,
    send,
    shot,
    sized_page,
    viewport_ids,
    wait_turns_over,
)

pytestmark = BROWSER_TESTS
UNFINISHED = ("The model was still thinking when its answer ended, so there is no answer. "
              "Its thinking so far is above; try again, or ask for a shorter answer.")
TOO_LONG = ("This message is 40,000 characters; the limit is 32,000 characters. Shorten it, "
            "or send it in parts.")


def stored_threads(gateway: LiveGateway) -> list[dict[str, Any]]:
    threads: list[dict[str, Any]] = httpx.get(gateway.url + "/api/threads",
                                              timeout=10).json()["threads"]
    return threads


@pytest.mark.parametrize("viewport", VIEWPORTS, ids=viewport_ids)
async def test_a_new_thread_is_stored_with_its_first_message_and_a_refusal_leaves_none(
    browser: Browser, fresh_gateway: LiveGateway, viewport: Viewport, tmp_path: Path
) -> None:
    async with sized_page(browser, viewport) as page:
        await page.goto(fresh_gateway.url + "/")
        await page.click("#new-thread")
        draft = page.locator(".thread-item.active")
        await expect(draft).to_have_count(1)
        await expect(draft.locator(".title")).to_have_text("New thread")
        await expect(page.locator("#thread-title")).to_have_text("New thread")
        await expect(page.locator("[data-testid=empty-state]")).to_have_text(
            "No messages yet. Write one below to start.")
        assert stored_threads(fresh_gateway) == []  # the button stored nothing
        await shot(page, tmp_path, f"new-thread-draft-{viewport.name}")

        await page.fill("#message-input", "é" * 40_000)  # refused by the gateway
        await page.click("#send")
        await expect(page.locator("#notice")).to_have_text(TOO_LONG)
        await expect(page.locator("#message-input")).to_have_value("é" * 40_000)
        await expect(page.locator(".thread-item.active .title")).to_have_text("New thread")
        assert stored_threads(fresh_gateway) == []  # no "Untitled thread · 0 messages"
        await shot(page, tmp_path, f"refused-first-send-{viewport.name}")

        await send(page, "Hello there")
        thread_id = await active_thread_id(page)
        [thread] = stored_threads(fresh_gateway)
        assert thread["id"] == thread_id and thread["message_count"] == 2
        await page.click("#new-thread")  # twice more: still one stored thread
        await page.click("#new-thread")
        await expect(page.locator("[data-testid=thread-draft]")).to_have_count(1)
        assert len(stored_threads(fresh_gateway)) == 1
        if viewport.name == "phone":  # the thread list is a drawer there
            await page.click("[data-testid=toggle-threads]")
        await page.locator(f'.thread-item[data-thread-id="{thread_id}"]').click()
        await expect(page.locator(".message")).to_have_count(2)
        await expect(page.locator("[data-testid=thread-draft]")).to_have_count(0)


@pytest.mark.parametrize("viewport", VIEWPORTS, ids=viewport_ids)
async def test_an_answer_that_never_finished_thinking_says_so(
    browser: Browser, web_gateway: LiveGateway, viewport: Viewport, tmp_path: Path
) -> None:
    async with sized_page(browser, viewport) as page:
        await page.goto(web_gateway.url + "/")
        await page.click("#new-thread")
        await page.fill("#message-input", "[think-unclosed] Tell me about tides")
        await page.click("#send")
        await wait_turns_over(page, 1)
        answer = page.locator(".message.assistant")
        await expect(answer.locator(".content")).to_have_text(UNFINISHED)
        await expect(answer.locator("[data-testid=reasoning]")).to_have_count(1)
        await shot(page, tmp_path, f"thinking-unfinished-{viewport.name}")
        await page.reload()
        await expect(page.locator(".message.assistant .content")).to_have_text(UNFINISHED)


@pytest.mark.parametrize("viewport", VIEWPORTS, ids=viewport_ids)
async def test_the_demo_models_code_answer_shows_two_code_blocks_with_copy(
    browser: Browser, web_gateway: LiveGateway, viewport: Viewport, tmp_path: Path
) -> None:
    async with sized_page(browser, viewport, clipboard=True) as page:
        await page.goto(web_gateway.url + "/")
        await page.click("#new-thread")
        await send(page, "[code] show me")
        blocks = page.locator(".message.assistant pre")
        await expect(blocks).to_have_count(2)
        await expect(page.locator(".message.assistant [data-testid=copy-code]")).to_have_count(2)
        python, javascript = CODE_ANSWER.split("```")[1], CODE_ANSWER.split("```")[3]
        assert (await blocks.nth(0).inner_text()).strip() == python.split("\n", 1)[1].strip()
        assert "n < 10" in await blocks.nth(1).inner_text()
        assert javascript.startswith("javascript\n")
        width, inner = await page.evaluate(
            "[document.documentElement.scrollWidth, window.innerWidth]")
        assert width <= inner
        await shot(page, tmp_path, f"code-{viewport.name}")
