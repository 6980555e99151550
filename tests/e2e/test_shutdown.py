"""A gateway process told to stop (SIGTERM) in the middle of answers: every open stream gets
a last event before its connection closes (native: `message_end` `interrupted`, reason
`shutting_down`; /v1: an `{"error": ...}` the openai SDK raises), the row is stored with
the text the client saw and `interrupted_reason` `shutting_down`, and the process logs no
traceback on its way out. A whole (non-streamed) /v1 reply ends at once too, with OpenAI's
503 `shutting_down`, and a thread's events stream with an `error` `shutting_down`."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import openai
import pytest
from sqlalchemy import select

from app.store.db import Database
from app.store.models import Message
from tests.e2e.helpers import new_thread
from tests.support.gateway import DemoLlm, GatewayProcess, StartGatewayProcess, iter_sse
from tests.support.resume import delta_text, read_first, rest

LONG = "[long] tell me everything"
K = 20
#: The process's shutdown: the stream's end is immediate, the store and exit take a moment.
SHUTDOWN_S = 10.0
#: "At once": well within the server's grace (5 s), which would otherwise cut the response.
AT_ONCE_S = 3.0


async def _stored(gateway: GatewayProcess, message_id: str) -> Message:
    db = Database(gateway.database_url)
    try:
        async with db.transaction() as session:
            row = (await session.execute(
                select(Message).where(Message.id == uuid.UUID(message_id)))).scalar_one()
            session.expunge(row)
            return row
    finally:
        await db.dispose()


async def _answer_in(gateway: GatewayProcess, thread_id: str) -> Message:
    db = Database(gateway.database_url)
    try:
        async with db.transaction() as session:
            row = (await session.execute(select(Message).where(
                Message.thread_id == uuid.UUID(thread_id),
                Message.role == "assistant"))).scalar_one()
            session.expunge(row)
            return row
    finally:
        await db.dispose()


def _no_traceback(gateway: GatewayProcess) -> None:
    gateway.process.wait(timeout=SHUTDOWN_S)
    text = gateway.log_text()
    assert "Traceback" not in text and "CancelledError" not in text, text[-3000:]
    errors = [line for line in gateway.logs() if line.get("level") == "error"]
    assert not errors, errors


async def test_sigterm_ends_a_native_stream_with_message_end_shutting_down(
    slow_demo_llm: DemoLlm, start_gateway_process: StartGatewayProcess
) -> None:
    gateway = start_gateway_process("sqlite", upstream=slow_demo_llm)
    key = await gateway.api_key("leaving")
    async with gateway.client(key) as client:
        thread_id = await new_thread(client, "t")
        async with client.stream("POST", f"/api/threads/{thread_id}/messages",
                                 json={"content": LONG}) as response:
            events = iter_sse(response)
            message_id, seen = await read_first(events, K)
            gateway.process.terminate()
            tail = await asyncio.wait_for(rest(events), SHUTDOWN_S)
    assert tail[-1].event == "message_end", tail[-3:]
    assert tail[-1].data == {"message_id": message_id, "status": "interrupted",
                             "reason": "shutting_down"}
    _no_traceback(gateway)
    row = await _stored(gateway, message_id)
    assert row.status == "interrupted"
    assert row.meta["interrupted_reason"] == "shutting_down"
    assert row.content == delta_text(seen) + delta_text(tail)


async def test_sigterm_ends_a_v1_stream_with_an_error_the_sdk_raises(
    slow_demo_llm: DemoLlm, start_gateway_process: StartGatewayProcess
) -> None:
    gateway = start_gateway_process("sqlite", upstream=slow_demo_llm)
    key = await gateway.api_key("leaving")
    async with gateway.client(key) as native:
        thread_id = await new_thread(native, "t")
    sdk = openai.AsyncOpenAI(base_url=gateway.url + "/v1", api_key=key, max_retries=0,
                             default_headers={"X-Chatgate-Thread-Id": thread_id})
    seen: list[str] = []
    stream: Any = await sdk.chat.completions.create(
        model="demo-1", stream=True,
        messages=[{"role": "user", "content": LONG}])
    with pytest.raises(openai.APIError) as raised:
        async with asyncio.timeout(SHUTDOWN_S):
            async for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    seen.append(chunk.choices[0].delta.content)
                    if len(seen) == K:
                        gateway.process.terminate()
    await sdk.close()
    assert len(seen) >= K
    assert "shutting down" in raised.value.message
    assert raised.value.code == "shutting_down"  # type: ignore[attr-defined]
    _no_traceback(gateway)
    row = await _answer_in(gateway, thread_id)
    assert row.status == "interrupted"
    assert row.meta["interrupted_reason"] == "shutting_down"
    assert row.content.startswith("".join(seen))


async def test_sigterm_ends_a_whole_v1_reply_at_once_with_shutting_down(
    slow_demo_llm: DemoLlm, start_gateway_process: StartGatewayProcess
) -> None:
    """A whole reply may take minutes: it is not left to the server's grace (which cut it
    with a bare text/plain 500) but ends at once with OpenAI's error, 503 `shutting_down`,
    which the SDKs raise (and retry, elsewhere); its row says the same."""
    gateway = start_gateway_process("sqlite", upstream=slow_demo_llm)
    key = await gateway.api_key("waiting")
    async with gateway.client(key) as native:
        thread_id = await new_thread(native, "t")
    before = slow_demo_llm.stats()["streams_started"]
    async with openai.AsyncOpenAI(base_url=gateway.url + "/v1", api_key=key, max_retries=0,
                                  default_headers={"X-Chatgate-Thread-Id": thread_id}
                                  ) as sdk:
        call = asyncio.ensure_future(sdk.chat.completions.create(
            model="demo-1", messages=[{"role": "user", "content": LONG}]))
        for _ in range(500):  # the model server is answering: the call is in flight
            if slow_demo_llm.stats()["streams_started"] > before:
                break
            await asyncio.sleep(0.02)
        gateway.process.terminate()
        with pytest.raises(openai.APIStatusError) as raised:
            await asyncio.wait_for(call, AT_ONCE_S)
    assert raised.value.status_code == 503
    assert raised.value.code == "shutting_down"  # type: ignore[attr-defined]
    assert "shutting down" in raised.value.message
    _no_traceback(gateway)
    row = await _answer_in(gateway, thread_id)
    assert row.status == "interrupted"
    assert row.meta["interrupted_reason"] == "shutting_down"


async def test_sigterm_ends_a_threads_events_stream_with_a_last_event(
    demo_llm: DemoLlm, start_gateway_process: StartGatewayProcess
) -> None:
    gateway = start_gateway_process("sqlite", upstream=demo_llm)
    key = await gateway.api_key("watching")
    async with gateway.client(key) as client:
        thread_id = await new_thread(client, "t")
        async with client.stream("GET", f"/api/threads/{thread_id}/events") as response:
            events = iter_sse(response)
            assert (await anext(events)).event == "ready"
            gateway.process.terminate()
            tail = await asyncio.wait_for(rest(events), AT_ONCE_S)
    assert [(event.event, event.data["code"]) for event in tail] == [("error", "shutting_down")]
    _no_traceback(gateway)
