"""A client that leaves mid-stream, with the demo model answering slowly over a real socket:
the thread keeps exactly the text the client was sent, `interrupted`, and the model server's
stream is closed; the call is still counted."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from tests.e2e.helpers import new_thread, wait_for_status
from tests.support.gateway import DemoLlm, StartGateway, start_demo_llm
from tests.support.http import sdk


@pytest.fixture(scope="module")
def paced_demo_llm() -> Iterator[DemoLlm]:
    """150 ms a delta: the client closes long before the gateway has a next delta to send,
    even on a busy machine, so what it read is all it was sent."""
    demo = start_demo_llm(delay_ms=150, slow_first_s=2.0)
    yield demo
    demo.stop()


async def test_leaving_mid_stream_keeps_what_was_sent(
    start_gateway: StartGateway, paced_demo_llm: DemoLlm
) -> None:
    gateway = start_gateway("sqlite", upstream=paced_demo_llm,
                            env={"CHATGATE_TITLE_CALLS": "false"})
    key = await gateway.api_key("leaver")
    async with gateway.client(key) as native:
        thread_id = await new_thread(native)
        client = sdk(gateway.url + "/v1", key, headers={"X-Chatgate-Thread-Id": thread_id})
        before = paced_demo_llm.stats()["streams_cancelled"]
        seen = ""
        async with client:
            stream = await client.chat.completions.create(
                model="demo-1", stream=True,
                messages=[{"role": "user", "content": "[long] tell me everything"}])
            async for chunk in stream:
                seen += (chunk.choices[0].delta.content or "") if chunk.choices else ""
                if len(seen) > 40:
                    break
            await stream.close()
        row = await wait_for_status(native, thread_id, "interrupted")
        usage = (await native.get("/api/usage")).json()
    assert row["content"] == seen
    assert row["metadata"]["usage_source"] == "partial"
    assert row["metadata"]["interrupted_reason"] == "client_gone"
    assert usage["totals"]["llm_call_count"] == 1
    for _ in range(100):  # the model server notices the closed connection on its next send
        if paced_demo_llm.stats()["streams_cancelled"] > before:
            break
        await asyncio.sleep(0.05)
    assert paced_demo_llm.stats()["streams_cancelled"] > before
