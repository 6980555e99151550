"""The page's first-hour items in a real Chromium against a real gateway: markdown rendered
safely, the phone layout, the stored answer shown when a stream ends, rename and delete,
retry, copy, errors in plain words, scroll-to-bottom and the empty state. Each test saves
screenshots of its states in its tmp_path."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest
from playwright.async_api import Browser, Page, Route, expect

from tests.support.gateway import DemoLlm, GatewayPool, LiveGateway, StartGatewayProcess
from tests.web.page_helpers import (
    AUTH_OFF,
    BROWSER_TESTS,
    DESKTOP,
    PHONE,
    VIEWPORTS,
    Viewport,
    active_thread_id,
    footers,
    open_thread,
    send,
    shot,
    sized_page,
    store_answers,
    viewport_ids,
    wait_turns_over,
)
from tests.web.visible_text import missing_tokens

pytestmark = BROWSER_TESTS
CONFORMANCE = Path(__file__).resolve().parents[1] / "stream" / "conformance" / "markers.jsonl"

MARKDOWN_ANSWER = (
    "# Plan\n\nSome **bold** and *italic* and `inline code`.\n\n"
    "```python\nprint('hello')\nfor i in range(3):\n    print(i)\n```\n\n"
    "| a | b |\n|---|---|\n| 1 | 2 |\n\n"
    "A [good link](https://example.com/docs) and a [bad one](javascript:alert(1)) and "
    "<img src=x onerror=\"window.__pageXss=1\"> and <script>window.__pageXss=1</script> "
    "and ![pixel](https://example.com/p.png)."
)


# ---------- markdown ----------


@pytest.mark.parametrize("viewport", VIEWPORTS, ids=viewport_ids)
async def test_answers_render_as_safe_markdown_with_code_copy(
    browser: Browser, web_gateway: LiveGateway, viewport: Viewport, tmp_path: Path
) -> None:
    thread_id, _ = await store_answers(web_gateway.database_url, [MARKDOWN_ANSWER])
    async with sized_page(browser, viewport, clipboard=True) as page:
        await open_thread(page, web_gateway.url, thread_id)
        answer = page.locator(".message.assistant .content")
        await expect(answer.locator("h1")).to_have_text("Plan")
        await expect(answer.locator("strong")).to_have_text("bold")
        await expect(answer.locator("em")).to_have_text("italic")
        await expect(answer.locator("table td").first).to_have_text("1")
        code = answer.locator("pre code")
        await expect(code).to_have_count(1)
        assert (await code.inner_text()).startswith("print('hello')")

        link = answer.locator("a:not(.image-link)")
        await expect(link).to_have_count(1)  # the javascript: one stays text
        assert await link.get_attribute("href") == "https://example.com/docs"
        assert await link.get_attribute("rel") == "noopener noreferrer"
        assert await link.get_attribute("target") == "_blank"
        shown = await answer.inner_text()
        assert "[bad one](javascript:alert(1))" in shown
        assert '<img src=x onerror="window.__pageXss=1">' in shown
        assert "<script>window.__pageXss=1</script>" in shown
        assert "**" not in shown and "```" not in shown
        assert await answer.locator("script, img, iframe, [onclick]").count() == 0
        image = answer.locator("a.image-link")  # nothing a model names is loaded
        await expect(image).to_have_text("pixel")
        assert await image.get_attribute("href") == "https://example.com/p.png"
        assert await image.get_attribute("rel") == "noopener noreferrer"
        assert await page.evaluate("window.__pageXss === undefined")
        await shot(page, tmp_path, f"markdown-{viewport.name}")

        await answer.locator("[data-testid=copy-code]").click()
        await expect(answer.locator("[data-testid=copy-code]")).to_have_attribute(
            "data-state", "copied")
        copied = await page.evaluate("navigator.clipboard.readText()")
        assert copied == "print('hello')\nfor i in range(3):\n    print(i)\n"
        await shot(page, tmp_path, f"markdown-copied-{viewport.name}")


async def test_the_demo_answer_streams_in_as_markdown(
    page: Page, web_gateway: LiveGateway, tmp_path: Path
) -> None:
    await page.goto(web_gateway.url + "/")
    await page.click("#new-thread")
    await send(page, "Hello there")
    answer = page.locator(".message.assistant .content")
    await expect(answer.locator("strong")).to_have_count(1)
    await expect(answer.locator("li")).to_have_count(3)
    assert "**" not in await answer.inner_text()
    await shot(page, tmp_path, "demo-answer")


async def test_every_conformance_answer_renders_without_losing_a_word(
    browser: Browser, web_gateway: LiveGateway, tmp_path: Path
) -> None:
    cases = [json.loads(line) for line in CONFORMANCE.read_text(encoding="utf-8").splitlines()
             if line.strip()]
    texts = [case["text"] for case in cases]
    thread_id, ids = await store_answers(web_gateway.database_url, texts, title="Conformance")
    async with sized_page(browser, DESKTOP) as page:
        await open_thread(page, web_gateway.url, thread_id)
        await expect(page.locator(".message.assistant")).to_have_count(len(cases))
        lost = {}
        for case, message_id in zip(cases, ids, strict=True):
            bubble = page.locator(f'.message[data-message-id="{message_id}"] .content')
            shown = await bubble.inner_text()
            missing = missing_tokens(case["text"], shown)
            if missing or (case["text"].strip() and not shown.strip()):
                lost[case["id"]] = {"stored": case["text"], "shown": shown, "missing": missing}
        await shot(page, tmp_path, "conformance")
    assert lost == {}


# ---------- layout ----------


#: Wider than any phone: a 300-character word, a long code line and a 20-column table.
WIDE_ANSWER = (
    f"{'A' * 300}\n\n```\n{'x = 1; ' * 60}\n```\n\n| {' | '.join('col' for _ in range(20))} |\n"
    f"|{'---|' * 20}\n| {' | '.join(str(n) for n in range(20))} |"
)


@pytest.fixture(scope="module")
def wide_thread_gateway(module_gateways: GatewayPool, demo_llm: DemoLlm) -> LiveGateway:
    """A gateway whose only thread is WIDE_ANSWER under a 200-character title: the phone
    layout tests only look at it, so they share it."""
    gateway = module_gateways.start_process("sqlite", upstream=demo_llm, env=AUTH_OFF)
    asyncio.run(store_answers(gateway.database_url, [WIDE_ANSWER], title="T" * 200))
    return gateway


@pytest.mark.parametrize("width", [360, 390, 430])
async def test_phone_layout_never_scrolls_sideways(
    browser: Browser, wide_thread_gateway: LiveGateway, width: int, tmp_path: Path
) -> None:
    async with sized_page(browser, Viewport(f"w{width}", width, 844)) as page:
        await page.goto(wide_thread_gateway.url + "/")
        toggle = page.locator("[data-testid=toggle-threads]")
        await expect(toggle).to_be_visible()
        await expect(page.locator("#thread-list")).to_be_hidden()
        await assert_no_sideways_scroll(page)
        await shot(page, tmp_path, f"phone-{width}-start")

        await toggle.click()
        await expect(toggle).to_have_attribute("aria-expanded", "true")
        await expect(page.locator(".thread-item")).to_have_count(1)
        await assert_no_sideways_scroll(page)
        await shot(page, tmp_path, f"phone-{width}-threads-open")

        await page.locator(".thread-item").click()
        await expect(page.locator("#thread-list")).to_be_hidden()
        await expect(page.locator(".message.assistant")).to_have_count(1)
        await assert_no_sideways_scroll(page)
        for control in ("#send", "#message-input", "#new-thread", "#delete-thread"):
            await expect(page.locator(control)).to_be_in_viewport()
        await shot(page, tmp_path, f"phone-{width}-thread")


async def test_desktop_layout_shows_the_list_without_a_toggle(
    browser: Browser, fresh_gateway: LiveGateway, tmp_path: Path
) -> None:
    await store_answers(fresh_gateway.database_url, ["Hi"], title="T" * 200)
    async with sized_page(browser, DESKTOP) as page:
        await page.goto(fresh_gateway.url + "/")
        await expect(page.locator("[data-testid=toggle-threads]")).to_be_hidden()
        await expect(page.locator(".thread-item")).to_be_visible()
        await assert_no_sideways_scroll(page)
        await shot(page, tmp_path, "desktop-list")


async def assert_no_sideways_scroll(page: Page) -> None:
    width, inner = await page.evaluate(
        "[document.documentElement.scrollWidth, window.innerWidth]")
    assert width <= inner, f"the page is {width} px wide in a {inner} px window"


# ---------- what the page shows is what is stored ----------


@pytest.mark.parametrize("viewport", VIEWPORTS, ids=viewport_ids)
async def test_finished_turns_show_what_a_reload_shows(
    browser: Browser, web_gateway: LiveGateway, viewport: Viewport, tmp_path: Path
) -> None:
    async with sized_page(browser, viewport) as page:
        await page.goto(web_gateway.url + "/")
        await page.click("#new-thread")
        for text in ("Hello", "[no-usage] Again", "[error-before] Fail", "[empty] Nothing"):
            await send(page, text)
        live = await footers(page)
        await shot(page, tmp_path, f"turns-live-{viewport.name}")
        thread_id = await active_thread_id(page)
        await page.reload()
        await expect(page.locator(".message")).to_have_count(8)
        assert await footers(page) == live
        await shot(page, tmp_path, f"turns-reloaded-{viewport.name}")

    answers = [item for index, item in enumerate(live) if index % 2 == 1]
    assert all(item["time"] and item["time"][0] for item in live)
    assert answers[0]["usage"][0].endswith(" tokens") and answers[0]["status"] == []
    assert answers[1]["usage"][0].endswith(" · estimated")
    assert answers[2]["status"] == ["failed: the model server returned an error"]
    assert answers[3]["content"] == "The model returned no text."
    async with web_gateway.client() as client:
        stored = (await client.get(f"/api/threads/{thread_id}/messages")).json()["messages"]
    assert stored[7]["content"] == "" and stored[7]["status"] == "complete"


async def test_stop_shows_the_stored_partial_answer(
    browser: Browser, slow_gateway: LiveGateway, tmp_path: Path
) -> None:
    async with sized_page(browser, DESKTOP) as page:
        await page.goto(slow_gateway.url + "/")
        await page.click("#new-thread")
        await page.fill("#message-input", "[long] tell me everything")
        await page.click("#send")
        await expect(page.locator(".message.assistant .content")).to_contain_text("Line 05")
        await page.click("#stop")
        await wait_turns_over(page, 1)
        live = await footers(page)
        await shot(page, tmp_path, "stopped-live")
        thread_id = await active_thread_id(page)
        async with slow_gateway.client() as client:
            stored = (await client.get(f"/api/threads/{thread_id}/messages")).json()["messages"]
        assert stored[1]["status"] == "interrupted"
        assert stored[1]["metadata"]["interrupted_reason"] == "stop_request"
        assert live[1]["content"] == stored[1]["content"].rstrip()
        assert live[1]["status"] == ["stopped"] and live[1]["usage"]

        await page.reload()
        await expect(page.locator(".message")).to_have_count(2)
        assert await footers(page) == live
        await shot(page, tmp_path, "stopped-reloaded")


# ---------- thread actions ----------


@pytest.mark.parametrize("viewport", VIEWPORTS, ids=viewport_ids)
async def test_rename_and_delete_a_thread(
    browser: Browser, fresh_gateway: LiveGateway, viewport: Viewport, tmp_path: Path
) -> None:
    thread_id, _ = await store_answers(fresh_gateway.database_url, ["Hi"], title="Old name")
    async with sized_page(browser, viewport) as page:
        await open_thread(page, fresh_gateway.url, thread_id)
        await page.click("[data-testid=rename-thread]")
        await page.fill("[data-testid=rename-input]", "   ")
        await page.click("[data-testid=rename-save]")
        await expect(page.locator("#notice")).to_have_text("A title needs 1 to 200 characters.")
        await expect(page.locator("[data-testid=rename-form]")).to_be_visible()
        await shot(page, tmp_path, f"rename-refused-{viewport.name}")

        await page.fill("[data-testid=rename-input]", "Tides and moons")
        await page.press("[data-testid=rename-input]", "Enter")
        await expect(page.locator("#thread-title")).to_have_text("Tides and moons")
        await expect(page.locator(".thread-item .title")).to_have_text("Tides and moons")
        await shot(page, tmp_path, f"renamed-{viewport.name}")
        async with fresh_gateway.client() as client:
            listed = (await client.get("/api/threads")).json()["threads"]
        assert listed[0]["title"] == "Tides and moons"

        page.once("dialog", lambda dialog: dialog.accept())
        await page.click("[data-testid=delete-thread]")
        await expect(page.locator(".thread-item")).to_have_count(0)
        await expect(page.locator("[data-testid=empty-state]")).to_contain_text("No thread open")
        await expect(page.locator("[data-testid=delete-thread]")).to_be_hidden()
        await shot(page, tmp_path, f"deleted-{viewport.name}")
        async with fresh_gateway.client() as client:
            gone = await client.get(f"/api/threads/{thread_id}/messages")
        assert gone.status_code == 404


async def test_a_dismissed_delete_keeps_the_thread(
    page: Page, fresh_gateway: LiveGateway
) -> None:
    thread_id, _ = await store_answers(fresh_gateway.database_url, ["Hi"])
    await open_thread(page, fresh_gateway.url, thread_id)
    page.once("dialog", lambda dialog: dialog.dismiss())
    await page.click("[data-testid=delete-thread]")
    await expect(page.locator(".thread-item")).to_have_count(1)
    await expect(page.locator(".message")).to_have_count(2)


# ---------- message actions ----------


async def test_retry_asks_the_question_again_for_a_new_answer(
    page: Page, web_gateway: LiveGateway, tmp_path: Path
) -> None:
    await page.goto(web_gateway.url + "/")
    await page.click("#new-thread")
    await send(page, "[error-before] Tell me about tides")
    failed = page.locator(".message.assistant").first
    await expect(failed.locator("[data-testid=message-retry]")).to_be_visible()
    await shot(page, tmp_path, "retry-offered")
    await failed.locator("[data-testid=message-retry]").click()
    # The new answer is a second version of the failed one; the question is asked once.
    await expect(failed.locator("[data-testid=version-label]")).to_have_text("2/2")
    await wait_turns_over(page, 1)
    await expect(page.locator(".message.user .content")).to_have_text(
        ["[error-before] Tell me about tides"])
    await expect(page.locator(".message.assistant .status")).to_have_count(1)
    await shot(page, tmp_path, "retried")
    # A complete answer offers no retry.
    await send(page, "Hello")
    await expect(page.locator(".message.assistant").nth(1).locator(
        "[data-testid=message-retry]")).to_have_count(0)


async def test_copy_a_message(
    browser: Browser, web_gateway: LiveGateway, tmp_path: Path
) -> None:
    thread_id, _ = await store_answers(web_gateway.database_url, ["Some **bold** words."])
    async with sized_page(browser, DESKTOP, clipboard=True) as page:
        await open_thread(page, web_gateway.url, thread_id)
        button = page.locator(".message.assistant [data-testid=message-copy]")
        await button.click()
        await expect(button).to_have_attribute("data-state", "copied")
        assert await page.evaluate("navigator.clipboard.readText()") == "Some **bold** words."
        await shot(page, tmp_path, "copied")


# ---------- errors ----------


async def test_keys_mode_without_a_key_keeps_the_text_and_says_what_to_do(
    browser: Browser, start_gateway_process: StartGatewayProcess, demo_llm: DemoLlm,
    tmp_path: Path,
) -> None:
    web_gateway = start_gateway_process("sqlite", upstream=demo_llm)  # auth mode: keys
    async with sized_page(browser, PHONE) as page:
        await page.goto(web_gateway.url + "/")
        await page.fill("#message-input", "My carefully typed question")
        await page.click("#send")
        await expect(page.locator("#notice")).to_have_text(
            "This gateway needs an API key: set it under API key.")
        await expect(page.locator("#message-input")).to_have_value("My carefully typed question")
        await expect(page.locator(".message")).to_have_count(0)
        await expect(page.locator("#api-key")).to_be_visible()
        await shot(page, tmp_path, "no-key")

        await page.fill("#api-key", await web_gateway.api_key("alice"))
        await page.press("#api-key", "Enter")
        await page.click("#send")
        await wait_turns_over(page, 1)
        await expect(page.locator("#message-input")).to_have_value("")
        await expect(page.locator("#notice")).to_have_text("")
        await shot(page, tmp_path, "with-key")


@pytest.mark.parametrize(
    ("status", "headers", "expected"),
    [
        (429, {"Retry-After": "7"}, "Too many requests; try again in 7 s."),
        (503, {"Retry-After": "12"}, "The gateway is busy; try again in 12 s."),
        (413, {}, "'content' is 40000 characters; the limit is 32000"),
    ],
    ids=["429", "503", "413"],
)
async def test_refused_sends_say_why_in_plain_words(
    page: Page, web_gateway: LiveGateway, status: int, headers: dict[str, str], expected: str,
    tmp_path: Path,
) -> None:
    body = json.dumps({"error": {"code": "x", "message":
                                 "'content' is 40000 characters; the limit is 32000"}})

    async def refuse(route: Route) -> None:
        if route.request.method != "POST":
            await route.continue_()
            return
        await route.fulfill(status=status, headers=headers, body=body,
                            content_type="application/json")

    await page.route("**/api/threads/*/messages", refuse)
    await page.goto(web_gateway.url + "/")
    await page.click("#new-thread")
    await page.fill("#message-input", "keep me")
    await page.click("#send")
    await expect(page.locator("#notice")).to_have_text(expected)
    await expect(page.locator("#message-input")).to_have_value("keep me")
    await expect(page.locator(".message")).to_have_count(0)
    await shot(page, tmp_path, f"refused-{status}")


async def test_a_network_failure_says_so_and_keeps_the_text(
    page: Page, web_gateway: LiveGateway, tmp_path: Path
) -> None:
    await page.goto(web_gateway.url + "/")
    await page.click("#new-thread")
    await page.route("**/api/threads/*/messages", lambda route: route.abort("internetdisconnected"))
    await page.fill("#message-input", "still here")
    await page.click("#send")
    await expect(page.locator("#notice")).to_have_text(
        "Cannot reach the gateway: check the connection and try again.")
    await expect(page.locator("#message-input")).to_have_value("still here")
    await shot(page, tmp_path, "network-failure")


# ---------- scrolling and empty states ----------


@pytest.mark.parametrize("viewport", VIEWPORTS, ids=viewport_ids)
async def test_scroll_to_bottom(
    browser: Browser, web_gateway: LiveGateway, viewport: Viewport, tmp_path: Path
) -> None:
    answers = [f"Answer number {n}.\n\n" + "A line of text.\n" * 8 for n in range(1, 16)]
    thread_id, ids = await store_answers(web_gateway.database_url, answers)
    async with sized_page(browser, viewport) as page:
        await open_thread(page, web_gateway.url, thread_id)
        last = page.locator(f'.message[data-message-id="{ids[-1]}"]')
        await expect(last).to_be_in_viewport()
        button = page.locator("[data-testid=scroll-bottom]")
        await expect(button).to_be_hidden()
        await page.locator("#messages").evaluate("box => { box.scrollTop = 0; }")
        await expect(button).to_be_visible()
        await expect(last).not_to_be_in_viewport()
        await shot(page, tmp_path, f"scrolled-up-{viewport.name}")
        await button.click()
        await expect(last).to_be_in_viewport()
        await expect(button).to_be_hidden()
        await shot(page, tmp_path, f"scrolled-down-{viewport.name}")


@pytest.mark.parametrize("viewport", VIEWPORTS, ids=viewport_ids)
async def test_empty_states_say_what_to_do(
    browser: Browser, web_gateway: LiveGateway, viewport: Viewport, tmp_path: Path
) -> None:
    async with sized_page(browser, viewport) as page:
        await page.goto(web_gateway.url + "/")
        await expect(page.locator("[data-testid=empty-state]")).to_have_text(
            "No thread open. Write a message below to start one, or pick a thread from the list.")
        await shot(page, tmp_path, f"empty-{viewport.name}")
        await page.click("#new-thread")
        await expect(page.locator("[data-testid=empty-state]")).to_have_text(
            "No messages yet. Write one below to start.")
        await shot(page, tmp_path, f"empty-thread-{viewport.name}")
        await send(page, "Hello")
        await expect(page.locator("[data-testid=empty-state]")).to_have_count(0)


async def test_the_api_shapes_the_page_relies_on(web_gateway: LiveGateway) -> None:
    """Times and usage come from these fields: a rename of them must fail here, too."""
    thread_id, ids = await store_answers(web_gateway.database_url, ["x"], metadata={
        "tokens": 5, "prompt_tokens": 3, "completion_tokens": 2, "usage_source": "provider"})
    async with httpx.AsyncClient(base_url=web_gateway.url) as client:
        rows = (await client.get(f"/api/threads/{thread_id}/messages")).json()["messages"]
    assert rows[1]["id"] == ids[0]
    assert rows[1]["created_at"] and rows[1]["metadata"]["tokens"] == 5


async def test_when_the_stored_row_cannot_be_read_the_streamed_answer_stays(
    page: Page, web_gateway: LiveGateway, tmp_path: Path
) -> None:
    """The page asks for the stored row after each stream; if the gateway cannot answer, the
    bubble keeps what streamed and says how the stream ended."""
    await page.goto(web_gateway.url + "/")
    await page.click("#new-thread")
    sent = {"post": False}

    async def history(route: Route) -> None:
        if route.request.method == "POST":
            sent["post"] = True
            await route.continue_()
        elif sent["post"]:
            await route.fulfill(status=500, body="{}", content_type="application/json")
        else:
            await route.continue_()

    await page.route("**/api/threads/*/messages", history)
    await send(page, "[error-before] Fail")
    await expect(page.locator(".message.assistant .status")).to_have_text(
        "failed: the model server returned an error")
    await send(page, "[long] Go")
    await expect(page.locator(".message.assistant .usage").nth(1)).to_contain_text("tokens")
    await expect(page.locator(".message.assistant .status")).to_have_count(1)  # complete
    assert "Line 40" in await page.locator(".message.assistant .content").nth(1).inner_text()
    thread_id = await active_thread_id(page)
    async with web_gateway.client() as client:
        stored = (await client.get(f"/api/threads/{thread_id}/messages")).json()
    assert [m["status"] for m in stored["messages"]][1::2] == ["failed", "complete"]
    await shot(page, tmp_path, "stored-row-unreadable")
