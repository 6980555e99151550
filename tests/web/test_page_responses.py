"""The page in a real Chromium keeps a `previous_response_id` chain of three Responses API
turns off its list of chats, and under the origin filter shows it as one thread: three
questions, three answers, in order."""

from __future__ import annotations

from playwright.async_api import Page, expect

from tests.support.gateway import DemoLlm, StartGateway
from tests.support.http import sdk
from tests.web.page_helpers import BROWSER_TESTS

pytestmark = BROWSER_TESTS
QUESTIONS = ["What are tides?", "Why twice a day?", "And spring tides?"]


async def test_a_chain_of_three_responses_is_one_api_conversation_on_the_page(
    start_gateway: StartGateway, demo_llm: DemoLlm, page: Page
) -> None:
    gateway = start_gateway("sqlite", upstream=demo_llm, env={
        "CHATGATE_AUTH_MODE": "off", "CHATGATE_TITLE_CALLS": "false"})
    answers = []
    async with sdk(gateway.url + "/v1", "local") as client:
        previous = None
        for question in QUESTIONS:
            reply = await client.responses.create(
                model="demo-1", input=question,
                **({"previous_response_id": previous} if previous else {}))
            previous = reply.id
            answers.append(reply.output_text)
    await page.goto(gateway.url + "/")
    await expect(page.get_by_test_id("list-empty")).to_be_visible()  # the chats: none
    await page.get_by_test_id("thread-origin").select_option("responses")
    await expect(page.locator(".thread-item")).to_have_count(1)
    await page.locator(".thread-item").first.click()
    await expect(page.locator(".message.user")).to_have_count(3)
    await expect(page.locator(".message.assistant")).to_have_count(3)
    users = [t.strip() for t in await page.locator(".message.user .content").all_inner_texts()]
    assert users == QUESTIONS
    shown = await page.locator(".message.assistant .content").all_inner_texts()
    assert all(answer.split()[0] in text for answer, text in zip(answers, shown, strict=True))
