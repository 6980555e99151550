"""Server-sent events as a client reads them: a whole body (`parse_sse`), a stream as it
arrives (`iter_sse`), and one posted turn read to its end (`post_turn`)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx


@dataclass(frozen=True)
class SseEvent:
    event: str
    data: Any
    id: str | None


def parse_sse(text: str) -> list[SseEvent]:
    """Events of a complete `text/event-stream` body (comment/ping lines skipped)."""
    events: list[SseEvent] = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        name, event_id, data_lines = "message", None, []
        for line in block.split("\n"):
            if not line or line.startswith(":"):
                continue
            key, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if key == "event":
                name = value
            elif key == "data":
                data_lines.append(value)
            elif key == "id":
                event_id = value
        if data_lines:
            events.append(SseEvent(name, json.loads("\n".join(data_lines)), event_id))
    return events


@dataclass
class TurnResult:
    """One streamed turn as the client saw it."""

    status_code: int
    events: list[SseEvent]
    raw: str
    body: Any = None

    def of(self, name: str) -> list[SseEvent]:
        return [e for e in self.events if e.event == name]

    def one(self, name: str) -> Any:
        found = self.of(name)
        assert len(found) == 1, f"expected one {name!r} event, got {len(found)}: {self.raw!r}"
        return found[0].data

    @property
    def text(self) -> str:
        """The concatenation of the delta events."""
        return "".join(e.data["text"] for e in self.of("delta"))

    @property
    def names(self) -> list[str]:
        return [e.event for e in self.events]


async def post_turn(client: httpx.AsyncClient, thread_id: str, content: Any,
                    *, raw_body: bytes | None = None) -> TurnResult:
    """POST a message and read the whole answer (SSE) or the error body (JSON)."""
    kwargs: dict[str, Any] = (
        {"content": raw_body, "headers": {"Content-Type": "application/json"}}
        if raw_body is not None else {"json": {"content": content}}
    )
    return await post_stream(client, f"/api/threads/{thread_id}/messages", **kwargs)


async def post_stream(client: httpx.AsyncClient, path: str, **kwargs: Any) -> TurnResult:
    """POST to a route that answers with a turn's stream, and read the whole answer (SSE)
    or the error body (JSON)."""
    async with client.stream("POST", path, **kwargs) as resp:
        text = (await resp.aread()).decode("utf-8")
    if resp.headers.get("content-type", "").startswith("text/event-stream"):
        return TurnResult(resp.status_code, parse_sse(text), text)
    return TurnResult(resp.status_code, [], text, json.loads(text) if text else None)


async def iter_sse(response: httpx.Response) -> AsyncIterator[SseEvent]:
    """Events as they arrive on an open streaming response."""
    buffer = ""
    async for piece in response.aiter_text():
        buffer += piece.replace("\r\n", "\n")
        while "\n\n" in buffer:
            block, buffer = buffer.split("\n\n", 1)
            for event in parse_sse(block + "\n\n"):
                yield event
