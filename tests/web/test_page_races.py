"""The page against answers that arrive in an unlucky order: a quick turn announced on the
thread's event stream before its own stream has named its bubbles, and a history read that
was asked for before a send and answered after it. Both are forced with Playwright routes
that hold a real response back; each test fails on a page that draws what arrives blindly."""

from __future__ import annotations

import asyncio

from playwright.async_api import Browser, Request, Route, expect

from tests.support.gateway import LiveGateway
from tests.web.page_helpers import (
    BROWSER_TESTS,
    DESKTOP,
    STREAMING,
    TURN_OVER,
    send,
    sized_page,
)

pytestmark = BROWSER_TESTS
MESSAGES = "**/api/threads/*/messages"
#: Long enough for the thread's event stream to bring a notice the page already has, on a
#: loaded machine; an ordering pause, not a deadline: nothing is asserted about time.
NOTICE_LEAD_S = 1.0


async def test_an_answer_announced_before_its_stream_arrives_is_shown_once(
    browser: Browser, web_gateway: LiveGateway
) -> None:
    async with sized_page(browser, DESKTOP) as page:
        await page.goto(web_gateway.url + "/")
        await page.click("#new-thread")
        await send(page, "Hello")

        async def stream_late(route: Route, request: Request) -> None:
            if request.method != "POST":
                await route.continue_()
                return
            response = await route.fetch()  # the whole turn: stored and announced by now
            await asyncio.sleep(NOTICE_LEAD_S)
            await route.fulfill(response=response)

        await page.route(MESSAGES, stream_late)
        await send(page, "[empty] Nothing")
        await page.unroute(MESSAGES)
        await expect(page.locator(".message")).to_have_count(4)
        await expect(page.locator(".message.assistant")).to_have_count(2)


async def test_a_history_read_answered_after_a_send_keeps_both(
    browser: Browser, web_gateway: LiveGateway
) -> None:
    async with sized_page(browser, DESKTOP) as page:
        await page.goto(web_gateway.url + "/")
        await page.click("#new-thread")
        await send(page, "First question")
        thread_url = page.url
        first_read = asyncio.get_running_loop().create_future()
        release = asyncio.Event()

        async def history_late(route: Route, request: Request) -> None:
            if request.method != "GET" or first_read.done():
                await route.continue_()
                return
            first_read.set_result(None)
            response = await route.fetch()  # read now, before the send below
            await release.wait()
            await route.fulfill(response=response)

        await page.route(MESSAGES, history_late)
        await page.goto(thread_url)
        await page.reload()
        await first_read
        await page.fill("#message-input", "Second question")
        await page.click("#send")  # its bubbles are drawn before click() returns
        await expect(page.locator(TURN_OVER).first).to_be_visible(timeout=30_000)
        await expect(page.locator(STREAMING)).to_have_count(0)
        release.set()
        await expect(page.locator(".message")).to_have_count(4)
        users = await page.locator(".message.user .content").all_inner_texts()
        assert users == ["First question", "Second question"]
        await expect(page.locator(STREAMING)).to_have_count(0)
