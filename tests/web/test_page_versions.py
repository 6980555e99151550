"""Versions of a message in a real Chromium against a real gateway, at desktop and phone size:
Regenerate puts a new answer beside the old one (the question stays once), Edit puts a new
question beside the old one with its own answer, and the `‹ 2/2 ›` navigator shows either
version, the choice kept across a reload. Nothing is deleted. With CHATGATE_SCREENSHOT_DIR
set, the states are saved there as screenshots."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from playwright.async_api import Browser, Locator, Page, expect

from tests.support.gateway import DemoLlm, GatewayPool, LiveGateway
from tests.web.page_helpers import (
    AUTH_OFF,
    BROWSER_TESTS,
    STREAMING,
    VIEWPORTS,
    Viewport,
    active_thread_id,
    send,
    shot,
    sized_page,
    viewport_ids,
)

pytestmark = BROWSER_TESTS
QUESTION = "Tell me about tides"


async def save_shot(page: Page, name: str) -> None:
    """A screenshot into CHATGATE_SCREENSHOT_DIR, when it is set (nothing otherwise)."""
    folder = os.environ.get("CHATGATE_SCREENSHOT_DIR")
    if not folder:
        return
    Path(folder).mkdir(parents=True, exist_ok=True)
    await shot(page, Path(folder), name)


def two_models(tmp_path: Path, demo: DemoLlm) -> str:
    """`full` (the default) and `brief`, the same demo model cut at 12 tokens: the two
    answers to one question differ, as a user sees them."""
    path = tmp_path / "models.toml"
    path.write_text(f"""
[servers.demo]
base_url = "{demo.base_url}"

[[models]]
name = "full"
server = "demo"
model_id = "demo-full"

[[models]]
name = "brief"
server = "demo"
model_id = "demo-brief"
max_tokens = 12
""")
    return str(path)


def versions_of(message: Locator) -> tuple[Locator, Locator, Locator]:
    """A message's navigator: its previous button, its label and its next button."""
    return (message.get_by_test_id("version-prev"), message.get_by_test_id("version-label"),
            message.get_by_test_id("version-next"))


async def no_sideways_scroll(page: Page) -> None:
    width, inner = await page.evaluate(
        "[document.documentElement.scrollWidth, window.innerWidth]")
    assert width <= inner


@pytest.fixture(scope="module")
def two_models_gateway(module_gateways: GatewayPool, demo_llm: DemoLlm,
                       tmp_path_factory: pytest.TempPathFactory) -> LiveGateway:
    """The module's gateway offering `full` and `brief`, shared: each test asks in a thread of
    its own."""
    models = two_models(tmp_path_factory.mktemp("two_models"), demo_llm)
    return module_gateways.start_process("sqlite", upstream=demo_llm, env={
        **AUTH_OFF, "CHATGATE_MODELS_FILE": models})


@pytest.mark.parametrize("viewport", VIEWPORTS, ids=viewport_ids)
async def test_regenerate_puts_a_new_answer_beside_the_old_one(
    browser: Browser, two_models_gateway: LiveGateway, viewport: Viewport,
) -> None:
    """The new answer comes from the model picked now (`brief`), so the two versions read
    differently; the question is asked once, and the version last shown stays shown."""
    gateway = two_models_gateway
    async with sized_page(browser, viewport) as page:
        await page.goto(gateway.url + "/")
        await page.click("#new-thread")
        await send(page, QUESTION)
        answer = page.locator(".message.assistant")
        await expect(answer.get_by_test_id("message-model")).to_have_text("full")
        await expect(answer.get_by_test_id("versions")).to_have_count(0)  # one version yet
        first_text = await answer.locator(".content").inner_text()
        assert "It streams in small pieces" in first_text

        await page.get_by_test_id("model-picker").select_option("brief")
        await answer.get_by_test_id("message-regenerate").click()
        prev, label, nxt = versions_of(answer)
        await expect(label).to_have_text("2/2")
        await expect(page.locator(".message.user .content")).to_have_text([QUESTION])
        await expect(answer).to_have_count(1)
        await expect(answer.get_by_test_id("message-model")).to_have_text("brief")
        await expect(answer.get_by_test_id("message-cut")).to_have_text("cut at the token limit")
        await expect(answer.locator(".content")).not_to_have_text(first_text)
        await expect(prev).to_be_enabled()
        await expect(prev).to_have_accessible_name("Previous version")
        await expect(nxt).to_be_disabled()
        await expect(nxt).to_have_accessible_name("Next version")
        await expect(prev).to_be_in_viewport()
        await no_sideways_scroll(page)
        await save_shot(page, f"regenerated-2of2-{viewport.name}")

        await prev.click()
        await expect(label).to_have_text("1/2")
        await expect(answer.locator(".content")).to_have_text(first_text)
        await expect(answer.get_by_test_id("message-model")).to_have_text("full")
        await expect(answer.get_by_test_id("message-cut")).to_have_count(0)
        await expect(prev).to_be_disabled()
        await expect(nxt).to_be_enabled()
        await expect(page.locator(".message.user .content")).to_have_text([QUESTION])
        await expect(page.locator(".message")).to_have_count(2)
        await save_shot(page, f"regenerated-1of2-{viewport.name}")

        await nxt.click()
        await expect(label).to_have_text("2/2")
        await expect(answer.get_by_test_id("message-model")).to_have_text("brief")
        await prev.click()  # the version chosen last: the first answer
        await expect(label).to_have_text("1/2")

        thread_id = await active_thread_id(page)
        await page.reload()
        await expect(page.locator(".thread-item.active")).to_have_attribute(
            "data-thread-id", thread_id)
        await expect(label).to_have_text("1/2")
        await expect(answer.locator(".content")).to_have_text(first_text)
        await expect(page.locator(".message.user .content")).to_have_text([QUESTION])
        await expect(page.locator(".message")).to_have_count(2)


@pytest.mark.parametrize("viewport", VIEWPORTS, ids=viewport_ids)
async def test_edit_puts_a_new_question_beside_the_old_one(
    browser: Browser, web_gateway: LiveGateway, viewport: Viewport,
) -> None:
    async with sized_page(browser, viewport) as page:
        await page.goto(web_gateway.url + "/")
        await page.click("#new-thread")
        await send(page, "First question")
        await send(page, "Tell me about tdies")
        answers = page.locator(".message.assistant")
        first_answer = await answers.nth(0).locator(".content").inner_text()
        old_answer = await answers.nth(1).locator(".content").inner_text()
        assert "tdies" in old_answer

        questions = page.locator(".message.user")
        await expect(questions.nth(0).get_by_test_id("message-edit")).to_be_visible()  # any
        await questions.nth(1).get_by_test_id("message-edit").click()
        await expect(page.locator("#message-input")).to_have_value("Tell me about tdies")
        await expect(page.get_by_test_id("editing")).to_be_visible()
        await page.fill("#message-input", "Tell me about tides")
        await page.click("#send")

        prev, label, nxt = versions_of(questions.nth(1))
        await expect(label).to_have_text("2/2")
        await expect(page.locator(".message.user .content")).to_have_text(
            ["First question", "Tell me about tides"])
        await expect(answers).to_have_count(2)
        await expect(page.locator(STREAMING)).to_have_count(0)
        await expect(answers.nth(0).locator(".content")).to_have_text(first_answer)
        await expect(answers.nth(1)).to_contain_text("Tell me about tides")
        await expect(answers.nth(1)).not_to_contain_text("tdies")
        await expect(page.get_by_test_id("editing")).to_be_hidden()
        await expect(page.locator("#message-input")).to_have_value("")
        await expect(questions.nth(0).get_by_test_id("versions")).to_have_count(0)
        await expect(answers.get_by_test_id("versions")).to_have_count(0)  # one answer each
        await expect(prev).to_be_enabled()
        await expect(nxt).to_be_disabled()
        await no_sideways_scroll(page)
        await save_shot(page, f"edited-2of2-{viewport.name}")

        await prev.click()
        await expect(label).to_have_text("1/2")
        await expect(page.locator(".message.user .content")).to_have_text(
            ["First question", "Tell me about tdies"])
        await expect(answers).to_have_count(2)
        await expect(answers.nth(1).locator(".content")).to_have_text(old_answer)
        await expect(nxt).to_be_enabled()
        await nxt.click()
        await expect(label).to_have_text("2/2")
        await expect(page.locator(".message.user .content")).to_have_text(
            ["First question", "Tell me about tides"])
        await expect(answers.nth(1)).to_contain_text("Tell me about tides")


@pytest.mark.parametrize("viewport", VIEWPORTS, ids=viewport_ids)
async def test_versions_cannot_change_while_an_answer_streams(
    browser: Browser, slow_gateway_url: str, viewport: Viewport,
) -> None:
    async with sized_page(browser, viewport) as page:
        await page.goto(slow_gateway_url + "/")
        await page.click("#new-thread")
        await send(page, QUESTION)
        first = page.locator(".message.assistant").first
        await first.get_by_test_id("message-regenerate").click()
        prev, label, _ = versions_of(first)
        await expect(label).to_have_text("2/2")
        await expect(prev).to_be_enabled()

        await page.fill("#message-input", "[long] And about moons")
        await page.click("#send")
        await expect(page.locator(STREAMING)).to_have_count(1)
        await expect(prev).to_be_disabled()
        await expect(page.locator(".message.user").first.get_by_test_id("message-edit")
                     ).to_be_hidden()
        await page.click("#stop")
        await expect(page.locator("body[data-turn=idle]")).to_have_count(1, timeout=30_000)
        await expect(page.locator(STREAMING)).to_have_count(0)
        await expect(prev).to_be_enabled()
        await expect(label).to_have_text("2/2")
