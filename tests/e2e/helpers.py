"""Small helpers shared by the end-to-end tests."""

from __future__ import annotations

import asyncio
import contextlib
import re
from typing import Any

import httpx

from tests.support.gateway import DemoLlm, LiveGateway, iter_sse

HEADER = re.compile(r"<!--[ \t\r\n]{0,16}(METADATA|MSG_CONTEXT)", re.IGNORECASE)


async def new_thread(client: httpx.AsyncClient, title: str | None = None) -> str:
    response = await client.post("/api/threads", json={"title": title} if title else {})
    assert response.status_code == 201, response.text
    thread_id: str = response.json()["id"]
    return thread_id


async def messages(client: httpx.AsyncClient, thread_id: str, **params: str) -> list[Any]:
    response = await client.get(f"/api/threads/{thread_id}/messages", params=params)
    assert response.status_code == 200, response.text
    rows: list[Any] = response.json()["messages"]
    return rows


async def wait_for_status(
    client: httpx.AsyncClient, thread_id: str, status: str, timeout_s: float = 10.0
) -> dict[str, Any]:
    """The thread's last message once it has `status` (polling; the turn is stored async)."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    last: dict[str, Any] = {}
    while asyncio.get_running_loop().time() < deadline:
        rows = await messages(client, thread_id)
        if rows and rows[-1]["status"] == status:
            found: dict[str, Any] = rows[-1]
            return found
        last = rows[-1] if rows else {}
        await asyncio.sleep(0.05)
    raise AssertionError(f"last message never became {status!r}: {last}")


async def wait_upstream_cancelled(demo: DemoLlm, before: int) -> None:
    """Until the demo server has seen one more stream cancelled than `before`, and none
    runs: the gateway closed the upstream connection."""
    for _ in range(200):
        stats = demo.stats()
        if stats["streams_cancelled"] > before and stats["active_streams"] == 0:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"upstream stream not cancelled: {demo.stats()}")


async def read_then_leave(
    client: httpx.AsyncClient, thread_id: str, content: str, after_chars: int = 40
) -> str:
    """Post a turn, read deltas until more than `after_chars` arrived, then hang up."""
    received = ""
    async with client.stream("POST", f"/api/threads/{thread_id}/messages",
                             json={"content": content}) as response:
        async for event in iter_sse(response):
            if event.event == "delta":
                received += event.data["text"]
            if len(received) > after_chars:
                break
    return received


async def keyed_client(gateway: LiveGateway, user: str, *,
                       over_http: bool = False) -> httpx.AsyncClient:
    """A client with a new key of `user`: in memory for an in-process gateway unless
    `over_http` (a test that reads a stream as it arrives or hangs up mid-way needs the
    socket)."""
    return gateway.client(await gateway.api_key(user), over_http=over_http)


def turn_log_lines(
    gateway: LiveGateway, request_id: str, message_id: str
) -> list[dict[str, Any]]:
    """The log lines of one user turn: those of its HTTP request and those of its assistant
    message. A line missing one of the two ids is still found by the other."""
    return [
        line for line in gateway.logs()
        if line.get("request_id") == request_id or line.get("message_id") == message_id
    ]


#: Held back by the demo model (its first token after `slow_first_s`): a call that is let in
#: stays open while its rival is decided.
HELD = "[slow-first] hold on"


async def race_native_and_thread_less(native: httpx.AsyncClient, v1: httpx.AsyncClient,
                                      model: str) -> int:
    """One user's native turn and thread-less streamed /v1 call sent at once, on the
    clients given (one gateway, or two); how many were let in (anything but 429
    `too_many_streams`). Both are held open until both statuses are known: a call left
    before its rival is decided would free its place, and both would rightly pass."""
    thread_id = await new_thread(native)
    async with contextlib.AsyncExitStack() as held:
        responses = await asyncio.gather(
            held.enter_async_context(native.stream(
                "POST", f"/api/threads/{thread_id}/messages", json={"content": HELD})),
            held.enter_async_context(v1.stream("POST", "/v1/chat/completions", json={
                "model": model, "stream": True,
                "messages": [{"role": "user", "content": HELD}]})))
        for response in responses:
            if response.status_code == 429:
                await response.aread()
                assert response.json()["error"]["code"] == "too_many_streams", response.text
        return sum(response.status_code != 429 for response in responses)
