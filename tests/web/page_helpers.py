"""Helpers for the page's browser tests: pages of a given size, screenshots, stored answers
written straight into a gateway's database, and the turn-waiting locators."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from playwright.async_api import Browser, ConsoleMessage, Page, ViewportSize, expect

from app.store.db import Database
from app.store.models import Message
from app.threads import repository as thread_store
from tests.support.browser import (
    BROWSER_TESTS,  # noqa: F401 (the page tests' marks)
    lent_page,
)

#: Locator-based waits: the page's CSP forbids eval, which wait_for_function() relies on.
TURN_OVER = "body[data-turn=idle] .message.assistant:not(.streaming)"
STREAMING = ".message.assistant.streaming"
LOCAL_USER = "local"  # everyone, when the gateway's auth mode is off


@dataclass(frozen=True)
class Viewport:
    name: str
    width: int
    height: int


DESKTOP = Viewport("desktop", 1280, 800)
PHONE = Viewport("phone", 390, 844)
VIEWPORTS = [DESKTOP, PHONE]


@asynccontextmanager
async def sized_page(
    browser: Browser, viewport: Viewport, *, clipboard: bool = False,
    color_scheme: Literal["light", "dark"] = "light",
) -> AsyncIterator[Page]:
    """A page of that size, in a system set to that colour scheme, holding nothing of another
    test's (`lent_page`); uncaught page errors and anything the page's CSP refuses fail the
    test."""
    errors: list[str] = []

    def page_error(error: Exception) -> None:
        errors.append(str(error))

    def console(message: ConsoleMessage) -> None:
        # Whatever the page does, its strict CSP never has to refuse it.
        if "Content Security Policy" in message.text:
            errors.append(message.text)

    async with lent_page(
        browser, viewport=ViewportSize(width=viewport.width, height=viewport.height),
        color_scheme=color_scheme,
        permissions=["clipboard-read", "clipboard-write"] if clipboard else None,
    ) as page:
        page.on("pageerror", page_error)
        page.on("console", console)
        yield page
        page.remove_listener("pageerror", page_error)
        page.remove_listener("console", console)
    assert errors == [], f"uncaught errors or CSP refusals in the page: {errors}"


async def shot(page: Page, folder: Path, name: str) -> Path:
    """Save what the page looks like now (the whole page) as folder/name.png."""
    path = folder / f"{name}.png"
    await page.screenshot(path=str(path), full_page=True)
    return path


async def wait_turns_over(page: Page, count: int) -> None:
    await expect(page.locator(TURN_OVER)).to_have_count(count, timeout=30_000)
    await expect(page.locator(STREAMING)).to_have_count(0)


async def send(page: Page, text: str) -> None:
    """Send a message from the composer and wait until its answer is over."""
    before = await page.locator(TURN_OVER).count()
    await page.fill("#message-input", text)
    await page.click("#send")
    await wait_turns_over(page, before + 1)


async def active_thread_id(page: Page) -> str:
    await expect(page.locator(".thread-item.active")).to_have_count(1)
    thread_id = await page.locator(".thread-item.active").get_attribute("data-thread-id")
    assert thread_id
    return thread_id


async def footers(page: Page) -> list[dict[str, Any]]:
    """Each bubble's content, status, time and usage as the user reads them."""
    return [
        {
            "content": await node.locator(".content").inner_text(),
            "status": await texts(node.locator(".status")),
            "time": await texts(node.locator("time")),
            "usage": await texts(node.locator(".usage")),
        }
        for node in await page.locator(".message").all()
    ]


async def texts(locator: Any) -> list[str]:
    return [await item.inner_text() for item in await locator.all()]


async def store_answers(
    database_url: str, answers: Sequence[str], *, title: str = "Stored answers",
    metadata: dict[str, Any] | None = None,
) -> tuple[str, list[str]]:
    """A thread of the local user holding, for each answer, a question and that answer as a
    complete assistant message; returns the thread id and the answers' message ids."""
    db = Database(database_url)
    start = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=len(answers) + 1)
    ids: list[str] = []
    try:
        async with db.transaction() as session:
            thread = await thread_store.create_thread(session, LOCAL_USER, title)
            for n, text in enumerate(answers):
                asked = start + dt.timedelta(minutes=n)
                session.add(_message(thread.id, "user", f"Question {n + 1}", asked, {}))
                answer = _message(thread.id, "assistant", text, asked + dt.timedelta(seconds=1),
                                  metadata or {})
                session.add(answer)
                ids.append(str(answer.id))
            thread_id = str(thread.id)
    finally:
        await db.dispose()
    return thread_id, ids


def _message(thread_id: uuid.UUID, role: str, content: str, when: dt.datetime,
             meta: dict[str, Any]) -> Message:
    return Message(id=uuid.uuid4(), thread_id=thread_id, user_id=LOCAL_USER, role=role,
                   content=content, meta=meta, status="complete", synthetic=False,
                   created_at=when, updated_at=when, completed_at=when)


#: The page's tests run without keys unless they test keys.
AUTH_OFF = {"CHATGATE_AUTH_MODE": "off"}


def viewport_ids(viewport: Viewport) -> str:
    return viewport.name


async def open_thread(page: Page, url: str, thread_id: str) -> None:
    """The page opened on a stored thread, its messages drawn."""
    await page.goto(f"{url}/#thread={thread_id}")
    await expect(page.locator(".thread-item.active")).to_have_count(1)
    await expect(page.locator(".message").first).to_be_visible()
