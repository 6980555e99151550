"""The page's model picker in a real Chromium, desktop and phone: a thread's model is picked
before a turn, sent with it and kept as the thread's; a new thread shows the default, and the
first thread shows its own choice again when opened."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from playwright.async_api import Browser, expect

from app.demo_llm.scenarios import split_context
from tests.support.gateway import DemoLlm, StartGateway
from tests.support.models_files import two_models
from tests.web.page_helpers import BROWSER_TESTS, VIEWPORTS, Viewport, send, sized_page

pytestmark = BROWSER_TESTS


@pytest.mark.parametrize("viewport", VIEWPORTS, ids=[v.name for v in VIEWPORTS])
async def test_the_picker_switches_a_threads_model(
    start_gateway: StartGateway, demo_llm: DemoLlm, browser: Browser,
    tmp_path: Path, viewport: Viewport,
) -> None:
    gateway = start_gateway("sqlite", upstream=demo_llm, env={
        "CHATGATE_AUTH_MODE": "off", "CHATGATE_TITLE_CALLS": "false",
        "CHATGATE_MODELS_FILE": two_models(tmp_path, demo_llm)})
    text = f"picked on the {viewport.name}"
    async with sized_page(browser, viewport) as page:
        await page.goto(gateway.url + "/")
        picker = page.get_by_test_id("model-picker")
        await expect(picker).to_be_visible()
        await expect(picker).to_have_value("first")
        await picker.select_option("second")
        await send(page, text)
        threads = httpx.get(gateway.url + "/api/threads", timeout=10).json()["threads"]
        assert [t["model"] for t in threads] == ["second"]
        asked = [r["body"]["model"] for r in demo_llm.requests(50) if r["body"].get("stream")
                 and text in split_context(str(r["body"]["messages"][-1]["content"]))[1]]
        assert asked == ["demo-2"]
        await page.get_by_test_id("new-thread").click()
        await expect(picker).to_have_value("first")
        if viewport.name == "phone":  # the thread list is a drawer there
            await page.locator("#toggle-threads").click()
        await page.locator(f'.thread-item[data-thread-id="{threads[0]["id"]}"]').click()
        await expect(picker).to_have_value("second")


def failing_first(tmp_path: Path, demo: DemoLlm) -> str:
    """`first` on a server nobody listens on, falling back to `second`."""
    path = tmp_path / "fallback.toml"
    path.write_text(f"""
[servers.a]
base_url = "http://127.0.0.1:9/v1"

[servers.b]
base_url = "{demo.base_url}"

[[models]]
name = "first"
server = "a"
model_id = "demo-1"
fallbacks = ["second"]

[[models]]
name = "second"
server = "b"
model_id = "demo-2"
""")
    return str(path)


#: What makes the picker look like the page's other fields: the thread search's.
FIELD_LOOK = ("borderTopLeftRadius", "borderTopColor", "borderTopStyle", "fontFamily",
              "color", "backgroundColor")


@pytest.mark.parametrize("viewport", VIEWPORTS, ids=[v.name for v in VIEWPORTS])
async def test_each_answer_names_its_model_and_the_picker_looks_like_the_page(
    start_gateway: StartGateway, demo_llm: DemoLlm, browser: Browser,
    tmp_path: Path, viewport: Viewport,
) -> None:
    gateway = start_gateway("sqlite", upstream=demo_llm, env={
        "CHATGATE_AUTH_MODE": "off", "CHATGATE_TITLE_CALLS": "false",
        "CHATGATE_MODELS_FILE": failing_first(tmp_path, demo_llm)})
    async with sized_page(browser, viewport) as page:
        await page.goto(gateway.url + "/")
        picker = page.get_by_test_id("model-picker")
        await expect(picker).to_be_visible()
        look = "(el, keys) => { const s = getComputedStyle(el); return keys.map((k) => s[k]); }"
        assert await picker.evaluate(look, list(FIELD_LOOK)) == await page.locator(
            "#thread-search").evaluate(look, list(FIELD_LOOK))
        box = await picker.bounding_box()
        assert box is not None and box["height"] >= 28 and box["x"] + box["width"] <= (
            viewport.width)
        await picker.select_option("second")
        await send(page, f"straight to second on the {viewport.name}")
        answer = page.locator(".message.assistant").last
        await expect(answer.get_by_test_id("message-model")).to_have_text("second")
        await page.get_by_test_id("new-thread").click()
        await expect(picker).to_have_value("first")
        await send(page, f"first fails on the {viewport.name}")
        answer = page.locator(".message.assistant").last
        await expect(answer.get_by_test_id("message-model")).to_have_text(
            "first · answered by second")
        await page.screenshot(path=str(tmp_path / f"models-{viewport.name}.png"))
        await page.reload()  # drawn from the stored row just the same
        await expect(page.get_by_test_id("message-model")).to_have_text(
            "first · answered by second")
    threads = httpx.get(gateway.url + "/api/threads", timeout=10).json()["threads"]
    stored = [(m["metadata"]["model_name"], m["metadata"]["answered_by"]["model"],
               m["metadata"]["model"])
              for t in reversed(threads)
              for m in httpx.get(f"{gateway.url}/api/threads/{t['id']}/messages",
                                 timeout=10).json()["messages"] if m["role"] == "assistant"]
    assert stored == [("second", "second", "demo-2"), ("first", "second", "demo-2")]
