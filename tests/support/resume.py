"""A client of resumable streams, as the tests use it: leave a turn after k deltas, then
come back with Last-Event-ID and read to the end."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx

from tests.support.gateway import SseEvent, iter_sse, parse_sse


@dataclass
class Left:
    """What a client had when it dropped: the turn's ids and the deltas it read."""

    thread_id: str
    message_id: str
    deltas: list[SseEvent]

    @property
    def text(self) -> str:
        return "".join(e.data["text"] for e in self.deltas)

    @property
    def last_id(self) -> int:
        return int(self.deltas[-1].id or 0)

    def stream_path(self) -> str:
        return f"/api/threads/{self.thread_id}/messages/{self.message_id}/stream"

    def stop_path(self) -> str:
        return f"/api/threads/{self.thread_id}/messages/{self.message_id}/stop"


async def read_first(events: AsyncIterator[SseEvent], k: int) -> tuple[str, list[SseEvent]]:
    """From an open turn stream: its assistant message id and its first `k` delta events
    (the stream stays open; `rest` reads it on)."""
    message_id, deltas, others = "", [], []
    async for event in events:
        if event.event == "message_start":
            message_id = event.data["assistant_message_id"]
        elif event.event == "delta":
            deltas.append(event)
            if len(deltas) >= k:
                break
        else:
            others.append(event)
    assert len(deltas) == k, f"the answer ended before {k} deltas: {others}"
    return message_id, deltas


async def rest(events: AsyncIterator[SseEvent]) -> list[SseEvent]:
    return [event async for event in events]


async def leave_after(client: httpx.AsyncClient, thread_id: str, content: str,
                      k: int) -> Left:
    """Post a turn, read its first `k` deltas, then hang up."""
    async with client.stream("POST", f"/api/threads/{thread_id}/messages",
                             json={"content": content}) as response:
        assert response.status_code == 200
        message_id, deltas = await read_first(iter_sse(response), k)
    return Left(thread_id, message_id, deltas)


async def resume(client: httpx.AsyncClient, left: Left, last_id: int | None = -1,
                 *, query: bool = False) -> tuple[int, list[SseEvent], str]:
    """GET the stream after `last_id` (-1: the last delta the client had; None: no id),
    read to its end: (status, events, raw body)."""
    after = left.last_id if last_id == -1 else last_id
    headers, params = {}, {}
    if after is not None:
        if query:
            params["last_event_id"] = str(after)
        else:
            headers["Last-Event-ID"] = str(after)
    async with client.stream("GET", left.stream_path(), headers=headers,
                             params=params) as response:
        body = (await response.aread()).decode()
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        return response.status_code, parse_sse(body), body
    return response.status_code, [], body


def delta_ids(events: list[SseEvent]) -> list[int]:
    return [int(e.id or 0) for e in events if e.event == "delta"]


def delta_text(events: list[SseEvent]) -> str:
    return "".join(e.data["text"] for e in events if e.event == "delta")
