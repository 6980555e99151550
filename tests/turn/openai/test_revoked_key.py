"""A /v1 call in flight when its key is revoked, through the openai SDK: a stream ends with
OpenAI's `{"error": ...}`, which the SDK raises (never a cut answer taken for a whole one); a
whole reply is refused with a 401 instead of answered; either way the call is billed for
what the model produced. The revocation check runs every 0.1 s here."""

from __future__ import annotations

import asyncio

import openai
import pytest

from app.keys import repository as api_keys
from app.store.db import Database
from tests.e2e.helpers import new_thread, wait_for_status
from tests.support.gateway import DemoLlm, InProcessGateway, StartGateway
from tests.support.http import sdk
from tests.turn.openai.cut_streams import CUT_WITHIN_S, LONG, cut_mid_stream


async def _revoke(db: Database, plaintext: str) -> None:
    async with db.transaction() as session:
        key = await api_keys.live_key(session, plaintext)
        assert key is not None
        assert await api_keys.revoke_key(session, key.id)


async def revoke(gateway: InProcessGateway, plaintext: str) -> None:
    await gateway.server.loop.arun(_revoke(gateway.runtime.db, plaintext))


async def billed_calls(gateway: InProcessGateway, user: str) -> dict[str, int]:
    """The user's usage totals, read with a second key of theirs (the first is revoked)."""
    async with gateway.client(await gateway.api_key(user)) as client:
        totals: dict[str, int] = (await client.get("/api/usage")).json()["totals"]
    return totals


def started(gateway: StartGateway, backend: str, upstream: DemoLlm) -> InProcessGateway:
    return gateway(backend, upstream=upstream, env={"CHATGATE_REVOCATION_CHECK_S": "0.1",
                                                    "CHATGATE_TITLE_CALLS": "false"})


async def test_a_stream_whose_key_is_revoked_raises_in_the_sdk(
    start_gateway: StartGateway, live_backend: str, slow_demo_llm: DemoLlm
) -> None:
    gateway = started(start_gateway, live_backend, slow_demo_llm)
    key = await gateway.api_key("mallory")
    seen, error = await cut_mid_stream(gateway, key, lambda: revoke(gateway, key))
    assert type(error) is openai.APIError  # raised from the stream, not a status
    assert error.body == {"message": "the API key was revoked",
                                 "type": "invalid_request_error", "param": None,
                                 "code": "key_revoked"}
    assert 0 < len(seen) < 2000  # far from the whole [long] answer
    totals = await billed_calls(gateway, "mallory")
    assert totals["llm_call_count"] == 1 and totals["completion_tokens"] > 0


async def test_a_whole_reply_in_flight_when_its_key_is_revoked_is_refused_and_billed(
    start_gateway: StartGateway, live_backend: str, slow_demo_llm: DemoLlm
) -> None:
    """In a thread: the answer is stored `interrupted`, as a stream cut by the revocation."""
    gateway = started(start_gateway, live_backend, slow_demo_llm)
    key = await gateway.api_key("eve")
    async with gateway.client(await gateway.api_key("eve")) as native:
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
        await revoke(gateway, key)
        with pytest.raises(openai.AuthenticationError) as caught:
            await asyncio.wait_for(call, CUT_WITHIN_S)
    assert caught.value.status_code == 401
    assert caught.value.body["code"] == "key_revoked"  # type: ignore[index]
    async with gateway.client(await gateway.api_key("eve")) as native:
        row = await wait_for_status(native, thread_id, "interrupted")
    assert len(row["content"]) < 2000  # far from the whole [long] answer
    assert row["metadata"]["usage_source"] == "partial"
    assert row["metadata"]["interrupted_reason"] == "key_revoked"
    totals = await billed_calls(gateway, "eve")
    assert totals["llm_call_count"] == 1
    assert totals["completion_tokens"] > 0 or row["content"] == ""  # what it produced


async def test_a_responses_stream_whose_key_is_revoked_raises_and_is_stored_interrupted(
    start_gateway: StartGateway, live_backend: str, slow_demo_llm: DemoLlm
) -> None:
    gateway = started(start_gateway, live_backend, slow_demo_llm)
    key = await gateway.api_key("trudy")
    seen, revoked, response_id = "", False, ""
    async with sdk(gateway.url + "/v1", key) as client:
        stream = await client.responses.create(model="demo-1", input=LONG[0]["content"],
                                               stream=True)
        with pytest.raises(openai.APIError) as caught:
            async with asyncio.timeout(CUT_WITHIN_S):
                async for event in stream:
                    if event.type == "response.created":
                        response_id = event.response.id
                    if event.type == "response.output_text.delta":
                        seen += event.delta
                    if seen and not revoked:
                        await revoke(gateway, key)
                        revoked = True
    assert type(caught.value) is openai.APIError  # raised from the stream, not a status
    assert caught.value.code == "key_revoked"
    assert 0 < len(seen) < 2000  # far from the whole [long] answer
    async with sdk(gateway.url + "/v1", await gateway.api_key("trudy")) as again:
        for _ in range(600):  # stored once the finish ran (bounded: 30 s on a loaded machine)
            stored = await again.responses.retrieve(response_id)
            if stored.status != "in_progress":
                break
            await asyncio.sleep(0.05)
    assert stored.status == "incomplete" and stored.output_text == seen
    assert stored.incomplete_details is not None
    assert stored.incomplete_details.reason == "key_revoked"  # type: ignore[comparison-overlap]
