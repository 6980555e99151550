"""app.api.sse in-process: a client that stops taking data is its own problem."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
import structlog
from sse_starlette import ServerSentEvent

from app.api.sse import StreamResponse, sse_event


async def endless() -> AsyncIterator[ServerSentEvent]:
    n = 0
    while True:
        n += 1
        yield sse_event("delta", {"text": f"piece {n}"}, str(n))
        await asyncio.sleep(0)


async def test_a_client_that_stops_reading_ends_the_thread_events_stream_quietly() -> None:
    sent: list[dict[str, Any]] = []
    stuck = asyncio.Event()

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)
        if len(sent) >= 3:  # the client's socket is full: this send never completes
            stuck.set()
            await asyncio.Event().wait()

    async def receive() -> dict[str, Any]:
        await asyncio.Event().wait()  # the client never disconnects either
        return {"type": "http.disconnect"}

    ids = {"user_id": "u1", "thread_id": "t1", "message_id": "m1"}
    response = StreamResponse(endless(), ping=60, sep="\n", send_timeout=0.2, log_ids=ids)
    scope = {"type": "http", "method": "POST", "path": "/api/threads/x/messages", "headers": []}
    with structlog.testing.capture_logs() as logs:
        await asyncio.wait_for(response(scope, receive, send), 5)  # returns: no exception
    assert stuck.is_set() and sent[0]["type"] == "http.response.start"
    assert [entry["event"] for entry in logs] == ["sse_send_timeout"]
    assert ids.items() <= logs[0].items()  # whose stream it was, for the operator


def test_events_are_compact_json_with_plain_line_ends() -> None:
    encoded = sse_event("delta", {"text": "ž <!--"}, "7").encode()
    assert encoded == 'id: 7\nevent: delta\ndata: {"text":"ž <!--"}\n\n'.encode()


@pytest.mark.parametrize("data", [{"a": [1, 2]}, None, "text"])
def test_any_json_value_is_one_data_line(data: Any) -> None:
    assert sse_event("x", data).encode().count(b"\ndata: ") == 1
