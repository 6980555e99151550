"""A /v1 call in flight when its process fences itself (its heartbeat lease ran out: it
ends every answer it runs before another process may take their threads over,
app.turn.holds.running), through the openai SDK: a stream ends with OpenAI's
`{"error": ...}` `database_unreachable`, which the SDK raises; a whole reply is a 503 at
once; a call in a thread is stored `interrupted` (`database_unreachable`) and one without is
billed. The fence is called here as the heartbeat's watchdog calls it (the database stays
up: tests/e2e/test_fencing.py cuts it), on SQLite too, which has no watchdog."""

from __future__ import annotations

import asyncio

import anthropic
import openai
import pytest

from tests.e2e.helpers import new_thread, wait_for_status
from tests.support.gateway import DemoLlm, InProcessGateway, StartGateway
from tests.support.http import sdk
from tests.support.waits import until
from tests.turn.openai.cut_streams import CUT_WITHIN_S, LONG, cut_mid_stream


async def fence(gateway: InProcessGateway) -> None:
    """What the heartbeat's watchdog calls once the lease runs out (app.process.service)."""
    async def fenced() -> None:
        gateway.runtime.processes.on_fenced()

    await gateway.server.loop.arun(fenced())


async def test_a_stream_without_a_thread_raises_database_unreachable_and_is_billed(
    start_gateway: StartGateway, live_backend: str, slow_demo_llm: DemoLlm
) -> None:
    gateway = start_gateway(live_backend, upstream=slow_demo_llm,
                            env={"CHATGATE_TITLE_CALLS": "false"})
    key = await gateway.api_key("cut-off")
    seen, error = await cut_mid_stream(gateway, key, lambda: fence(gateway))
    assert type(error) is openai.APIError  # raised from the stream, not a status
    assert error.code == "database_unreachable"  # type: ignore[attr-defined]
    assert 0 < len(seen) < 2000  # far from the whole [long] answer
    await until(lambda: len(gateway.runtime.turn_deps.running) == 0,
                what="the call's finish is over")
    async with gateway.client(await gateway.api_key("cut-off")) as native:
        totals = (await native.get("/api/usage")).json()["totals"]
    assert totals["llm_call_count"] == 1 and totals["completion_tokens"] > 0


async def test_a_whole_reply_in_a_thread_is_a_503_and_stored_interrupted(
    start_gateway: StartGateway, live_backend: str, slow_demo_llm: DemoLlm
) -> None:
    gateway = start_gateway(live_backend, upstream=slow_demo_llm,
                            env={"CHATGATE_TITLE_CALLS": "false"})
    key = await gateway.api_key("cut-off")
    async with gateway.client(key) as native:
        thread_id = await new_thread(native)
    before = slow_demo_llm.stats()["streams_started"]
    async with sdk(gateway.url + "/v1", key,
                   headers={"X-Chatgate-Thread-Id": thread_id}) as client:
        call = asyncio.ensure_future(client.chat.completions.create(model="demo-1",
                                                                    messages=LONG))
        for _ in range(200):  # the model server is answering: the call is in flight
            if slow_demo_llm.stats()["streams_started"] > before:
                break
            await asyncio.sleep(0.02)
        await fence(gateway)
        with pytest.raises(openai.APIStatusError) as caught:
            await asyncio.wait_for(call, CUT_WITHIN_S)
    assert caught.value.status_code == 503
    assert caught.value.code == "database_unreachable"  # type: ignore[attr-defined]
    async with gateway.client(key) as native:
        row = await wait_for_status(native, thread_id, "interrupted")
    assert len(row["content"]) < 2000
    assert row["metadata"]["interrupted_reason"] == "database_unreachable"


async def test_a_messages_stream_raises_in_the_anthropic_sdk(
    start_gateway: StartGateway, live_backend: str, slow_demo_llm: DemoLlm
) -> None:
    """The Messages API is one more adapter over the same run: fenced the same way, in
    Anthropic's own `error` event."""
    gateway = start_gateway(live_backend, upstream=slow_demo_llm,
                            env={"CHATGATE_TITLE_CALLS": "false"})
    key = await gateway.api_key("cut-off")
    seen, fenced = "", False
    async with anthropic.AsyncAnthropic(base_url=gateway.url, api_key=key,
                                        max_retries=0) as client:
        stream = await client.messages.create(model="demo-1", max_tokens=4000, messages=LONG,
                                              stream=True)
        with pytest.raises(anthropic.APIError) as caught:
            async with asyncio.timeout(CUT_WITHIN_S):
                async for event in stream:
                    if event.type == "content_block_delta" and event.delta.type == "text_delta":
                        seen += event.delta.text
                    if seen and not fenced:
                        await fence(gateway)
                        fenced = True
    assert "lost its database" in caught.value.message
    assert 0 < len(seen) < 2000
