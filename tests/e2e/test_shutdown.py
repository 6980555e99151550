"""A gateway process told to stop (SIGTERM) in the middle of answers: every open stream gets
a last event before its connection closes (native: `message_end` `interrupted`, reason
`shutting_down`; /v1: an `{"error": ...}` the openai SDK raises), the row is stored with
the text the client saw, and the process logs no traceback on its way out."""

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
    assert row.content == delta_text(seen) + delta_text(tail)


async def test_sigterm_ends_a_v1_stream_with_an_error_the_sdk_raises(
    slow_demo_llm: DemoLlm, start_gateway_process: StartGatewayProcess
) -> None:
    gateway = start_gateway_process("sqlite", upstream=slow_demo_llm)
    key = await gateway.api_key("leaving")
    sdk = openai.AsyncOpenAI(base_url=gateway.url + "/v1", api_key=key, max_retries=0)
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
