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
from tests.web.conftest import browser  # noqa: F401 - the shared Chromium fixture
from tests.web.page_helpers import BROWSER_TESTS, VIEWPORTS, Viewport, send, sized_page

pytestmark = BROWSER_TESTS


def two_models(tmp_path: Path, demo: DemoLlm) -> str:
    path = tmp_path / "models.toml"
    path.write_text(f"""
[servers.a]
base_url = "{demo.base_url}"

[servers.b]
base_url = "{demo.base_url}"

[[models]]
name = "first"
server = "a"
model_id = "demo-1"

[[models]]
name = "second"
server = "b"
model_id = "demo-2"
""")
    return str(path)


@pytest.mark.parametrize("viewport", VIEWPORTS, ids=[v.name for v in VIEWPORTS])
async def test_the_picker_switches_a_threads_model(
    start_gateway: StartGateway, demo_llm: DemoLlm, browser: Browser,  # noqa: F811
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
