"""The turn limits on `POST /v1/responses`, in process, on both backends, against the demo
model: the stream cap is OpenAI's 429 and leaves no thread behind; a continuation of a thread
that is streaming is a 409 naming `previous_response_id`."""

from __future__ import annotations

from typing import Any

import httpx

from tests.support.gateway import DemoLlm, same_loop_gateway


async def respond(client: httpx.AsyncClient, **body: Any) -> httpx.Response:
    return await client.post("/v1/responses", json={"model": "demo-1", **body})


async def test_the_stream_cap_refuses_and_leaves_no_thread(
    database_url: str, demo_llm: DemoLlm
) -> None:
    async with same_loop_gateway(database_url, demo_llm, max_streams_per_user=1) as gw:
        key = await gw.api_key("alice")
        async with gw.client(key) as client:
            first = await respond(client, input="Hello")
            assert first.status_code == 200, first.text
            thread_id = first.json()["chatgate"]["thread_id"]
            held = await gw.hold_turn("alice", thread_id)  # one answer streams
            try:
                capped = await respond(client, input="Another thread")
                threads = (await client.get("/api/threads?origin=responses")).json()["threads"]
            finally:
                await held.finish()
    error = capped.json()["error"]
    assert (capped.status_code, error["code"], error["type"]) == (
        429, "too_many_streams", "rate_limit_error")
    assert capped.headers["retry-after"] == "5"
    assert [t["id"] for t in threads] == [thread_id]  # no thread for the refused one


async def test_continuing_a_streaming_thread_is_a_409(
    database_url: str, demo_llm: DemoLlm
) -> None:
    async with same_loop_gateway(database_url, demo_llm) as gw:
        key = await gw.api_key("bob")
        async with gw.client(key) as client:
            first = (await respond(client, input="Hello")).json()
            held = await gw.hold_turn("bob", first["chatgate"]["thread_id"])
            try:
                busy = await respond(client, input="More", previous_response_id=first["id"])
            finally:
                await held.finish()
    error = busy.json()["error"]
    assert (busy.status_code, error["code"], error["param"]) == (
        409, "thread_busy", "previous_response_id")
