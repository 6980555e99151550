"""The page's rough edges, each as a user meets it, in a real Chromium against a real gateway
at desktop and phone size: Copy says it copied, notices look like what they are, a stopped
answer says "stopped", refusals name their cause, long words wrap, the dark theme follows the
system. Each test saves screenshots of its states in its tmp_path."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest
from playwright.async_api import Browser, Page, expect

from app.keys import repository as api_keys
from app.store.db import Database
from tests.support.gateway import DemoLlm, GatewayPool, LiveGateway
from tests.web.page_helpers import (
    AUTH_OFF,
    BROWSER_TESTS,
    VIEWPORTS,
    Viewport,
    active_thread_id,
    open_thread,
    send,
    shot,
    sized_page,
    store_answers,
    viewport_ids,
    wait_turns_over,
)

pytestmark = BROWSER_TESTS
ACCENT = "rgb(47, 111, 222)"
MUTED = "rgb(107, 116, 128)"


# ---------- copy ----------


@pytest.mark.parametrize("viewport", VIEWPORTS, ids=viewport_ids)
async def test_copy_says_copied_and_shows_it(
    browser: Browser, web_gateway: LiveGateway, viewport: Viewport, tmp_path: Path
) -> None:
    thread_id, _ = await store_answers(web_gateway.database_url, ["Some **bold** words."])
    async with sized_page(browser, viewport, clipboard=True) as page:
        await open_thread(page, web_gateway.url, thread_id)
        button = page.locator(".message.assistant [data-testid=message-copy]")
        await expect(button).to_have_css("color", MUTED)
        await button.click()
        await page.mouse.move(0, 0)  # a hovered button has its own colour
        await expect(button).to_have_text("Copied")
        await expect(button).to_have_css("color", ACCENT)
        await shot(page, tmp_path, f"copied-{viewport.name}")
        assert await page.evaluate("navigator.clipboard.readText()") == "Some **bold** words."
        await expect(button).to_have_text("Copy", timeout=5_000)
        await expect(button).to_have_css("color", MUTED)


# ---------- notices ----------

RED = "rgb(179, 38, 30)"


@pytest.mark.parametrize("viewport", VIEWPORTS, ids=viewport_ids)
async def test_news_is_not_red_and_errors_are(
    browser: Browser, web_gateway: LiveGateway, viewport: Viewport, tmp_path: Path
) -> None:
    thread_id, _ = await store_answers(web_gateway.database_url, ["Hi"], title="Old name")
    async with sized_page(browser, viewport) as page:
        await open_thread(page, web_gateway.url, thread_id)
        notice = page.locator("#notice")
        await page.click("[data-testid=rename-thread]")
        await page.fill("[data-testid=rename-input]", "   ")
        await page.click("[data-testid=rename-save]")
        await expect(notice).to_have_text("A title needs 1 to 200 characters.")
        await expect(notice).to_have_css("color", RED)
        await shot(page, tmp_path, f"notice-error-{viewport.name}")
        await page.click("#rename-cancel")

        page.once("dialog", lambda dialog: dialog.accept())
        await page.click("[data-testid=delete-thread]")
        await expect(notice).to_have_text("Thread deleted.")
        await expect(notice).to_have_css("color", ACCENT)
        await shot(page, tmp_path, f"notice-info-{viewport.name}")


# ---------- long words ----------


@pytest.mark.parametrize("viewport", VIEWPORTS, ids=viewport_ids)
async def test_a_long_word_wraps_inside_the_users_bubble(
    browser: Browser, web_gateway: LiveGateway, viewport: Viewport, tmp_path: Path
) -> None:
    word = "https://example.com/" + "averyveryverylongpathsegment" * 12
    async with sized_page(browser, viewport) as page:
        await page.goto(web_gateway.url + "/")
        await page.click("#new-thread")
        await send(page, f"Look at {word} please")
        bubble = page.locator(".message.user")
        await expect(bubble.locator(".content")).to_have_text(f"Look at {word} please")
        # One read of every size, so a redraw between two reads cannot mix two bubbles.
        sizes = await page.evaluate("""() => {
            const bubble = document.querySelector('.message.user');
            const content = bubble.querySelector('.content');
            const frame = document.getElementById('messages').getBoundingClientRect();
            const box = bubble.getBoundingClientRect();
            return {left: box.left - frame.left, right: frame.right - box.right,
                    text: content.scrollWidth, room: content.clientWidth,
                    page: document.documentElement.scrollWidth, window: window.innerWidth};
        }""")
        assert sizes["left"] >= 0 and sizes["right"] >= 0, sizes
        assert sizes["text"] <= sizes["room"], sizes
        assert sizes["page"] <= sizes["window"], sizes
        await expect(bubble.locator(".content")).to_have_text(f"Look at {word} please")
        await shot(page, tmp_path, f"long-word-{viewport.name}")


# ---------- dark theme ----------

THEMED_ANSWER = "Some **bold**, `code` and a [link](https://example.com).\n\n```\nx = 1\n```"


def luminance(css: str) -> float:
    """The relative luminance (WCAG) of an `rgb(r, g, b)` colour."""
    channels = [int(part) / 255 for part in css[css.index("(") + 1:css.index(")")].split(",")[:3]]
    linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def contrast(one: str, two: str) -> float:
    light, dark = sorted((luminance(one), luminance(two)), reverse=True)
    return (light + 0.05) / (dark + 0.05)


@pytest.mark.parametrize("viewport", VIEWPORTS, ids=viewport_ids)
@pytest.mark.parametrize("scheme", ["light", "dark"])
async def test_the_theme_follows_the_system_and_stays_legible(
    browser: Browser, web_gateway: LiveGateway, viewport: Viewport, scheme: str, tmp_path: Path
) -> None:
    thread_id, _ = await store_answers(web_gateway.database_url, [THEMED_ANSWER])
    async with sized_page(browser, viewport, color_scheme=scheme) as page:  # type: ignore[arg-type]
        await open_thread(page, web_gateway.url, thread_id)
        colours = await page.evaluate("""() => {
            const style = (selector) => getComputedStyle(document.querySelector(selector));
            return {
                page: style('html').backgroundColor,
                answer: style('.message.assistant').backgroundColor,
                text: style('.message.assistant .content').color,
                muted: style('.message.assistant .footer').color,
                link: style('.message.assistant .content a').color,
                user: style('.message.user').backgroundColor,
                userText: style('.message.user .content').color,
                input: style('#message-input').backgroundColor,
                inputText: style('#message-input').color,
                send: style('#send').backgroundColor,
                sendText: style('#send').color,
                code: style('.message.assistant pre').backgroundColor,
                codeText: style('.message.assistant pre code').color,
            };
        }""")
        await shot(page, tmp_path, f"theme-{scheme}-{viewport.name}")
    dark = luminance(colours["page"]) < 0.05
    assert dark == (scheme == "dark"), colours
    for text, ground in [("text", "answer"), ("link", "answer"), ("userText", "user"),
                         ("inputText", "input"), ("sendText", "send"), ("codeText", "code")]:
        assert contrast(colours[text], colours[ground]) >= 4.5, (text, ground, colours)
    assert contrast(colours["muted"], colours["answer"]) >= 3, colours


# ---------- plain previews and titles ----------


@pytest.mark.parametrize("viewport", VIEWPORTS, ids=viewport_ids)
async def test_the_list_shows_plain_titles_and_previews(
    browser: Browser, fresh_gateway: LiveGateway, viewport: Viewport, tmp_path: Path
) -> None:
    async with sized_page(browser, viewport) as page:
        await page.goto(fresh_gateway.url + "/")
        await page.click("#new-thread")
        await send(page, "# **Bold** heading and `code`")
        if viewport.name == "phone":
            await page.click("[data-testid=toggle-threads]")
        item = page.locator(".thread-item")
        await expect(item.locator(".title")).to_have_text("Bold heading and code")
        await expect(page.locator("#thread-title")).to_have_text("Bold heading and code")
        preview = await item.locator(".preview").inner_text()
        # The demo answers "about **# **Bold** heading and `code`**." and a list: a `#`
        # inside a line is a character, the rest is markup.
        assert preview.startswith(
            "Here is what I can tell you about # Bold heading and code. This answer comes")
        for markup in ("**", "`", " - "):
            assert markup not in preview, preview
        await shot(page, tmp_path, f"plain-list-{viewport.name}")


# ---------- keys and budgets ----------

NEEDS_KEY = "This gateway needs an API key: set it under API key."
NOT_ACCEPTED = ("This API key was not accepted: it is wrong or has been revoked. "
                "Check it under API key.")
BUDGET = re.compile(r"This key has used up its daily budget; it is renewed at midnight UTC "
                    r"\(in (\d+ h( \d+ min)?|\d+ min|\d+ s)\)\.")


async def revoke(database_url: str, plaintext: str) -> None:
    db = Database(database_url)
    try:
        async with db.transaction() as session:
            row = await api_keys.live_key(session, plaintext)
            assert row is not None
            assert await api_keys.revoke_key(session, row.id)
    finally:
        await db.dispose()


async def refused_with(page: Page, notice: str | re.Pattern[str], text: str) -> None:
    """Send `text`; the send is refused with `notice` and the composer keeps the text."""
    await page.fill("#message-input", text)
    await page.click("#send")
    await expect(page.locator("#notice")).to_have_text(notice)
    await expect(page.locator("#notice")).to_have_css("color", RED)
    await expect(page.locator("#message-input")).to_have_value(text)


async def use_key(page: Page, key: str) -> None:
    if not await page.locator("#api-key").is_visible():
        if await page.locator("[data-testid=toggle-threads]").is_visible():
            await page.click("[data-testid=toggle-threads]")
        await page.click("#settings summary")
    await page.fill("#api-key", key)
    await page.press("#api-key", "Enter")


@pytest.fixture(scope="module")
def keys_gateway(module_gateways: GatewayPool, demo_llm: DemoLlm) -> LiveGateway:
    """The module's gateway in auth mode `keys`, shared: each test's key is of a user of its
    own, as a key's daily budget counts everything its user spent that day."""
    return module_gateways.start_process("sqlite", upstream=demo_llm)


@pytest.mark.parametrize("viewport", VIEWPORTS, ids=viewport_ids)
async def test_missing_wrong_revoked_keys_and_a_spent_budget_each_say_so(
    browser: Browser, keys_gateway: LiveGateway, viewport: Viewport, tmp_path: Path,
) -> None:
    gateway = keys_gateway
    async with sized_page(browser, viewport) as page:
        await page.goto(gateway.url + "/")
        await refused_with(page, NEEDS_KEY, "First question")
        await shot(page, tmp_path, f"key-missing-{viewport.name}")

        await use_key(page, "cg-this-is-not-a-key")
        await refused_with(page, NOT_ACCEPTED, "First question")
        await shot(page, tmp_path, f"key-wrong-{viewport.name}")

        key = await gateway.api_key(f"alice-{viewport.name}", tokens=1)
        await use_key(page, key)
        await page.click("#send")
        await wait_turns_over(page, 1)
        await refused_with(page, BUDGET, "Second question")
        await expect(page.locator(".message")).to_have_count(2)  # nothing more was stored
        await shot(page, tmp_path, f"budget-spent-{viewport.name}")

        await revoke(gateway.database_url, key)
        await refused_with(page, NOT_ACCEPTED, "Second question")
        await shot(page, tmp_path, f"key-revoked-{viewport.name}")


# ---------- the character limit ----------


@pytest.mark.parametrize("viewport", VIEWPORTS, ids=viewport_ids)
async def test_a_long_paste_is_refused_in_characters_not_bytes(
    browser: Browser, web_gateway: LiveGateway, viewport: Viewport, tmp_path: Path
) -> None:
    async with sized_page(browser, viewport) as page:
        await page.goto(web_gateway.url + "/")
        await page.click("#new-thread")
        await expect(page.locator(".thread-item.active")).to_have_count(1)
        megabyte = "word " * 200_000  # 1 MB: refused before the body is read whole
        await refused_with(page, "This message is 1,000,000 characters; the limit is 32,000 "
                           "characters. Shorten it, or send it in parts.", megabyte)
        await shot(page, tmp_path, f"too-long-1mb-{viewport.name}")
        await refused_with(page, "This message is 40,000 characters; the limit is 32,000 "
                           "characters. Shorten it, or send it in parts.", "é" * 40_000)
        await expect(page.locator(".message")).to_have_count(0)
        await shot(page, tmp_path, f"too-long-40k-{viewport.name}")


# ---------- an answer cut at the token limit; regenerate ----------

@pytest.fixture(scope="module")
def cut_gateway(module_gateways: GatewayPool, demo_llm: DemoLlm) -> LiveGateway:
    """The module's gateway whose answers are cut at 300 tokens, shared: each test asks in a
    thread of its own."""
    return module_gateways.start_process(
        "sqlite", upstream=demo_llm, env={**AUTH_OFF, "CHATGATE_UPSTREAM_MAX_TOKENS": "300"})


@pytest.mark.parametrize("viewport", VIEWPORTS, ids=viewport_ids)
async def test_an_answer_cut_at_the_limit_says_so_and_continue_finishes_it_in_place(
    browser: Browser, cut_gateway: LiveGateway, viewport: Viewport, tmp_path: Path
) -> None:
    """Continue adds no question: the rest of the answer streams onto the same bubble, which
    ends as one whole answer (a 300-token limit cuts the long demo answer twice)."""
    gateway = cut_gateway
    async with sized_page(browser, viewport) as page:
        await page.goto(gateway.url + "/")
        await page.click("#new-thread")
        await send(page, "[long] Tell me about tides")
        cut = page.locator(".message.assistant").first
        await expect(cut.locator("[data-testid=message-cut]")).to_have_text(
            "cut at the token limit")
        await expect(cut.locator("[data-testid=message-status]")).to_have_count(0)  # complete
        await shot(page, tmp_path, f"cut-{viewport.name}")
        thread_id = await active_thread_id(page)
        await page.reload()
        await expect(page.locator(".message.assistant [data-testid=message-cut]")).to_be_visible()
        cut_text = await cut.locator(".content").inner_text()

        for _ in range(4):
            if not await cut.locator("[data-testid=message-continue]").count():
                break
            await cut.locator("[data-testid=message-continue]").click()
            await expect(page.locator("body[data-turn=idle]")).to_have_count(1, timeout=30_000)
            await expect(page.locator(".message.streaming")).to_have_count(0)
        await expect(page.locator(".message")).to_have_count(2)  # no question was added
        await expect(cut.locator("[data-testid=message-cut]")).to_have_count(0)
        await expect(cut.locator("[data-testid=message-continue]")).to_have_count(0)
        await expect(cut.locator(".content")).to_contain_text("Line 40 of the long demo answer")
        whole = await cut.locator(".content").inner_text()
        assert whole.startswith(cut_text.rstrip()) and whole.count("Line 01 ") == 1
        await shot(page, tmp_path, f"continued-{viewport.name}")
    async with gateway.client() as client:
        stored = (await client.get(f"/api/threads/{thread_id}/messages")).json()["messages"]
    assert [m["role"] for m in stored] == ["user", "assistant"]
    assert stored[1]["metadata"]["stream"]["finish_reason"] == "stop"
    assert stored[1]["metadata"]["continued"] >= 1


@pytest.mark.parametrize("viewport", VIEWPORTS, ids=viewport_ids)
async def test_regenerate_any_answer(
    browser: Browser, web_gateway: LiveGateway, viewport: Viewport, tmp_path: Path
) -> None:
    async with sized_page(browser, viewport) as page:
        await page.goto(web_gateway.url + "/")
        await page.click("#new-thread")
        await send(page, "Tell me about tides")
        await send(page, "And about moons")
        first = page.locator(".message.assistant").first
        await expect(first.locator("[data-testid=message-retry]")).to_have_count(0)
        await first.locator("[data-testid=message-regenerate]").click()
        # A new version of the first answer: the question is not asked twice, and what
        # followed the old answer leaves the page with it.
        await expect(first.locator("[data-testid=version-label]")).to_have_text("2/2")
        await wait_turns_over(page, 1)
        await expect(page.locator(".message.user .content")).to_have_text(
            ["Tell me about tides"])
        await expect(first).to_contain_text("Tell me about tides")
        await expect(page.locator("[data-testid=message-regenerate]")).to_have_count(1)
        # The reader was at the end: the new answer is shown to its end.
        await expect(first.locator(".footer")).to_be_in_viewport()
        await shot(page, tmp_path, f"regenerated-{viewport.name}")
        # Nothing was deleted: the first version comes back with what followed it.
        await first.locator("[data-testid=version-prev]").click()
        await expect(first.locator("[data-testid=version-label]")).to_have_text("1/2")
        await expect(page.locator(".message.user .content")).to_have_text(
            ["Tell me about tides", "And about moons"])
        await expect(page.locator(".message.assistant").nth(1)).to_contain_text(
            "And about moons")


# ---------- edit and resend ----------


@pytest.mark.parametrize("viewport", VIEWPORTS, ids=viewport_ids)
async def test_edit_and_resend_a_question(
    browser: Browser, web_gateway: LiveGateway, viewport: Viewport, tmp_path: Path
) -> None:
    async with sized_page(browser, viewport) as page:
        await page.goto(web_gateway.url + "/")
        await page.click("#new-thread")
        await send(page, "First question")
        await send(page, "Tell me about tdies")
        edits = page.locator(".message.user [data-testid=message-edit]")
        await expect(edits.nth(0)).to_be_visible()  # any question of the branch
        await edits.nth(1).click()
        await expect(page.locator("#message-input")).to_have_value("Tell me about tdies")
        await expect(page.locator("[data-testid=editing]")).to_be_visible()
        await page.click("[data-testid=cancel-edit]")
        await expect(page.locator("#message-input")).to_have_value("")
        await expect(page.locator("[data-testid=editing]")).to_be_hidden()
        await edits.nth(1).click()
        await page.press("#message-input", "Escape")  # the keyboard's way out
        await expect(page.locator("[data-testid=editing]")).to_be_hidden()
        await expect(page.locator("#message-input")).to_have_value("")

        await edits.nth(1).click()
        await page.fill("#message-input", "Tell me about tides")
        await shot(page, tmp_path, f"editing-{viewport.name}")
        await page.click("#send")
        await expect(page.locator(".message.user .content")).to_have_text(
            ["First question", "Tell me about tides"])
        await wait_turns_over(page, 2)
        await expect(page.locator(".message.assistant").nth(1)).to_contain_text(
            "Tell me about tides")
        await expect(page.locator("[data-testid=editing]")).to_be_hidden()
        edited = page.locator(".message.user").nth(1)
        await expect(edited.locator("[data-testid=version-label]")).to_have_text("2/2")
        await shot(page, tmp_path, f"edited-{viewport.name}")
        thread_id = await active_thread_id(page)
        await page.reload()
        await expect(page.locator(".message")).to_have_count(4)
        await expect(page.locator(".message.user .content")).to_have_text(
            ["First question", "Tell me about tides"])
        await expect(edited.locator("[data-testid=version-label]")).to_have_text("2/2")
    async with web_gateway.client() as client:
        stored = (await client.get(f"/api/threads/{thread_id}/messages")).json()["messages"]
        tree = (await client.get(f"/api/threads/{thread_id}/messages?tree=true")
                ).json()["messages"]
    assert "tdies" not in " ".join(m["content"] for m in stored)  # the branch shown
    assert "Tell me about tdies" in [m["content"] for m in tree]  # kept as a version


# ---------- search ----------


@pytest.fixture(scope="module")
def three_threads_gateway(module_gateways: GatewayPool, demo_llm: DemoLlm) -> LiveGateway:
    """A gateway holding three stored threads and nothing else: the search tests only
    search them, so they share it."""
    gateway = module_gateways.start_process("sqlite", upstream=demo_llm, env=AUTH_OFF)

    async def store() -> None:
        await store_answers(gateway.database_url, ["The **derailleur** needs oil."],
                            title="Bike repair")
        await store_answers(gateway.database_url, ["Because of the Moon."], title="Tides")
        await store_answers(gateway.database_url, ["Bread needs time."], title="Baking")

    asyncio.run(store())
    return gateway


@pytest.mark.parametrize("viewport", VIEWPORTS, ids=viewport_ids)
async def test_search_threads_by_title_and_text(
    browser: Browser, three_threads_gateway: LiveGateway, viewport: Viewport, tmp_path: Path
) -> None:
    async with sized_page(browser, viewport) as page:
        await page.goto(three_threads_gateway.url + "/")
        if viewport.name == "phone":
            await page.click("[data-testid=toggle-threads]")
        titles = page.locator(".thread-item .title")
        await expect(titles).to_have_count(3)
        box = page.locator("[data-testid=thread-search]")
        await box.fill("derail")  # a word of an answer, as it is typed
        await expect(titles).to_have_text(["Bike repair"])
        await shot(page, tmp_path, f"search-text-{viewport.name}")
        await box.fill("tid")  # part of a title
        await expect(titles).to_have_text(["Tides"])
        await box.fill("zeppelin")
        await expect(titles).to_have_count(0)
        await expect(page.locator("[data-testid=list-empty]")).to_have_text(
            "No thread matches “zeppelin”.")
        await shot(page, tmp_path, f"search-none-{viewport.name}")
        await box.fill("")
        await expect(titles).to_have_count(3)
