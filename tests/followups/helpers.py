"""Shared by the end-to-end follow-up tests: settings for fast follow-ups, PATCH helpers, and
direct reads of the gateway's database (rows produced through the real code path)."""

from __future__ import annotations

import asyncio
import datetime as dt
import itertools
import threading
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import httpx
from sqlalchemy import select

from app.core.clock import utcnow
from app.store.db import Database
from app.store.models import Followup, Message
from tests.support.gateway import iter_sse, post_turn

T = TypeVar("T")

#: Fast follow-ups for tests: poll 0.1 s, short lease, a small MSG_CONTEXT history budget (so
#: older messages leave the recent window and memory retrieval has something to find).
FAST_ENV: Mapping[str, str] = {
    "CHATGATE_FOLLOWUP_POLL_S": "0.1",
    "CHATGATE_FOLLOWUP_LEASE_S": "2",
    "CHATGATE_FOLLOWUP_MAX_ATTEMPTS": "3",
    "CHATGATE_CONTEXT_BUDGET_CHARS": "1200",
    "CHATGATE_TITLE_CALLS": "false",
    # Many turns at once on a loaded 2-core machine: do not fail them for a slow first token.
    "CHATGATE_FIRST_TOKEN_TIMEOUT_S": "10",
}


class HandClock:
    """A clock for the follow-up worker that runs with the real one plus an offset the test
    moves by hand: a follow-up due in a second, or a lease running out, is reached by
    `advance()` instead of by sleeping. Real time still flows underneath, because everything
    else (the scheduler's due times, message times) reads the real clock: the worker's view
    of "now" keeps its order with them.

    `reads` counts the worker's calls: every poll reads the clock, so reads going up by n
    means at least n - 1 polls ran to their end since (a poll's work is done before the
    next one reads)."""

    def __init__(self) -> None:
        self.offset = dt.timedelta(0)
        self.reads = 0
        self._lock = threading.Lock()  # called on the server loop's thread, read by tests

    def __call__(self) -> dt.datetime:
        with self._lock:
            self.reads += 1
            return utcnow() + self.offset

    def advance(self, seconds: float) -> None:
        """Move the worker's time on by `seconds`, at once."""
        with self._lock:
            self.offset += dt.timedelta(seconds=seconds)

    def set(self, moment: dt.datetime) -> None:
        """Make it `moment` for the worker now (time flows on from there)."""
        with self._lock:
            self.offset = moment - utcnow()

    async def polls(self, count: int = 3, timeout_s: float = 10.0) -> None:
        """Return once the worker has run at least `count` whole polls from now on: what a
        test waits for before it asserts that nothing (more) fired."""
        target = self.reads + count + 1
        deadline = asyncio.get_running_loop().time() + timeout_s
        while self.reads < target:
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"the worker did not poll {count} times in {timeout_s} s")
            await asyncio.sleep(0.02)


async def set_autonomy(client: httpx.AsyncClient, thread_id: str, **autonomy: Any) -> Any:
    response = await client.patch(f"/api/threads/{thread_id}", json={"autonomy": autonomy})
    assert response.status_code == 200, response.text
    return response.json()


async def pushed_messages_after_turn(
    watcher: httpx.AsyncClient, writer: httpx.AsyncClient, thread_id: str, content: str,
    count: int = 3, timeout_s: float = 15.0,
) -> list[dict[str, Any]]:
    """Subscribe to the thread's events through `watcher`, post a turn through `writer` once
    subscribed, and return the first `count` messages pushed to the subscriber."""
    received: list[dict[str, Any]] = []
    ready = asyncio.Event()

    async def watch() -> None:
        async with watcher.stream("GET", f"/api/threads/{thread_id}/events") as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            async for event in iter_sse(response):
                if event.event == "ready":
                    ready.set()
                elif event.event == "message":
                    received.append(event.data["message"])
                    if len(received) == count:
                        return

    task = asyncio.create_task(watch())
    await asyncio.wait_for(ready.wait(), 10)
    await post_turn(writer, thread_id, content)
    await asyncio.wait_for(task, timeout_s)
    return received


async def wait_until(check: Callable[[], Awaitable[T | None]], timeout_s: float = 15.0,
                     what: str = "condition") -> T:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        value = await check()
        if value:
            return value
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


class Rows:
    """Read-only view of a gateway's database."""

    def __init__(self, database_url: str) -> None:
        self.db = Database(database_url)

    async def close(self) -> None:
        await self.db.dispose()

    async def messages(self, thread_id: str) -> list[Message]:
        async with self.db.transaction() as s:
            result = await s.execute(
                select(Message).where(Message.thread_id == uuid.UUID(thread_id))
                .order_by(Message.created_at, Message.id))
            return list(result.scalars())

    async def followups(self, thread_id: str) -> list[Followup]:
        async with self.db.transaction() as s:
            result = await s.execute(
                select(Followup).where(Followup.thread_id == uuid.UUID(thread_id))
                .order_by(Followup.created_at))
            return list(result.scalars())

    async def synthetic(self, thread_id: str) -> list[Message]:
        return [m for m in await self.messages(thread_id) if m.synthetic]

    async def settled_followup_replies(self, thread_id: str, count: int) -> list[Message] | None:
        """The assistant replies to the first `count` synthetic prompts once all are settled."""
        rows = await self.messages(thread_id)
        replies = [b for a, b in itertools.pairwise(rows)
                   if a.synthetic and b.role == "assistant" and b.status != "streaming"]
        return replies if len(replies) >= count else None
