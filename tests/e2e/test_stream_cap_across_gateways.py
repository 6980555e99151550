"""The per-user stream cap holds across gateway processes: two gateways on one PostgreSQL
database, the user's streams (answers and thread-less calls) open on both, the next request
refused by either."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import httpx
import pytest

from tests.e2e.helpers import new_thread, race_native_and_thread_less, wait_for_status
from tests.support.gateway import DemoLlm, StartGatewayProcesses, iter_sse

pytestmark = pytest.mark.postgres
LONG = "[long] tell me everything"


@contextlib.asynccontextmanager
async def open_stream(client: httpx.AsyncClient, thread_id: str) -> AsyncIterator[None]:
    """A turn streaming its answer (first delta received) until the block ends. The answer
    is read on in a task meanwhile: leaving the event iterator would close the response."""
    async with client.stream("POST", f"/api/threads/{thread_id}/messages",
                             json={"content": LONG}) as response:
        assert response.status_code == 200
        first_delta = asyncio.Event()

        async def read() -> None:
            async for event in iter_sse(response):
                if event.event == "delta":
                    first_delta.set()

        reader = asyncio.create_task(read())
        try:
            await asyncio.wait_for(first_delta.wait(), timeout=20)
            yield
        finally:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader


async def test_two_gateways_share_one_users_stream_cap(
    slow_demo_llm: DemoLlm, start_gateway_processes: StartGatewayProcesses
) -> None:
    first, second = start_gateway_processes("postgresql", 2, upstream=slow_demo_llm,
                                            env={"CHATGATE_MAX_STREAMS_PER_USER": "2"})
    key = await first.api_key("alice")
    async with first.client(key) as a, second.client(key) as b:
        threads = [await new_thread(a) for _ in range(3)]
        async with open_stream(a, threads[0]):
            async with open_stream(b, threads[1]):
                for client in (a, b):
                    refused = await client.post(f"/api/threads/{threads[2]}/messages",
                                                json={"content": "one more"})
                    assert refused.status_code == 429, refused.text
                    assert refused.json()["error"]["code"] == "too_many_streams"
                    assert refused.headers["retry-after"]
            await wait_for_status(a, threads[1], "interrupted")  # left: stored, slot freed
            answer = await b.post(f"/api/threads/{threads[2]}/messages",
                                  json={"content": "one more"})
            assert answer.status_code == 200
            assert "event: message_end" in answer.text
    assert any(line.get("event") == "turn_refused" and line.get("code") == "too_many_streams"
               and line.get("user_id") == "alice" for line in second.logs())


async def test_a_turn_on_one_gateway_and_a_thread_less_call_on_another_are_never_both_let_in(
    demo_llm: DemoLlm, start_gateway_processes: StartGatewayProcesses
) -> None:
    """A thread-less call holds an `open_calls` row every process counts: 30 users each send
    a native turn to one gateway and a thread-less /v1 call to the other at once, against a
    cap of one; exactly one of each pair is let in."""
    first, second = start_gateway_processes("postgresql", 2, upstream=demo_llm, env={
        "CHATGATE_MAX_STREAMS_PER_USER": "1", "CHATGATE_TITLE_CALLS": "false"})

    async def pair(user: str) -> int:
        key = await first.api_key(user)
        async with first.client(key) as native, second.client(key) as v1:
            return await race_native_and_thread_less(native, v1, "demo-1")

    admitted: list[int] = []
    for batch in range(3):
        admitted += await asyncio.gather(*(pair(f"racer{batch}-{n}") for n in range(10)))
    assert admitted == [1] * 30
