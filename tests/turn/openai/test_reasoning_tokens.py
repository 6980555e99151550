"""The reasoning tokens a model server reports (`completion_tokens_details.reasoning_tokens`)
on every wire: chat completions' `usage.completion_tokens_details` (whole and in the streamed
usage chunk, read by the openai SDK), the native SSE `usage` event's `reasoning_tokens`, and
the Responses API's `output_tokens_details`; a server that reports none leaves them out
(null on the native stream): unknown is not zero."""

from __future__ import annotations

import json

import pytest

from tests.e2e.helpers import new_thread
from tests.support.gateway import InProcessGateway
from tests.support.gateway.sse import post_turn
from tests.support.http import sdk
from tests.support.scripted_upstream import completion_chunk, finish_chunk, usage_chunk
from tests.turn.openai.model_server import ModelServer, raw_body

MODEL = "scripted-1"


def thinking_usage(prompt: int, completion: int, reasoning: int) -> str:
    body = json.loads(usage_chunk(prompt, completion, prompt + completion))
    body["usage"]["completion_tokens_details"] = {"reasoning_tokens": reasoning}
    return json.dumps(body)


def prepare(server: ModelServer, key: str, reasoning: int | None) -> str:
    usage = (usage_chunk(11, 30, 41) if reasoning is None
             else thinking_usage(11, 30, reasoning))
    server.bodies[key] = raw_body([completion_chunk("<think>Let me see.</think>"),
                                   completion_chunk("Yes."), finish_chunk("stop"), usage])
    return f"[case:{key}] think first"


@pytest.mark.parametrize("reported", [23, None], ids=["reported", "not-reported"])
async def test_chat_completions_carry_the_reasoning_tokens_reported(
    oa_gateway: InProcessGateway, model_server: ModelServer, reported: int | None
) -> None:
    ask = prepare(model_server, f"tokens.chat.{reported}", reported)
    client = sdk(oa_gateway.url + "/v1", await oa_gateway.api_key(f"tokens-{reported}"))
    async with client:
        whole = await client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": ask}])
        stream = await client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": ask}], stream=True,
            stream_options={"include_usage": True})
        chunks = [c async for c in stream]
    [last] = [c for c in chunks if c.usage is not None]
    for usage in (whole.usage, last.usage):
        assert usage is not None and usage.completion_tokens == 30
        details = usage.completion_tokens_details
        assert (details.reasoning_tokens if details else None) == reported
    assert whole.choices[0].message.content == "Yes."


async def test_the_raw_chat_usage_names_the_field_or_leaves_it_out(
    oa_gateway: InProcessGateway, model_server: ModelServer
) -> None:
    async with oa_gateway.client(await oa_gateway.api_key("tokens-raw")) as client:
        said = await client.post("/v1/chat/completions", json={"model": MODEL, "messages": [
            {"role": "user", "content": prepare(model_server, "tokens.raw.7", 7)}]})
        silent = await client.post("/v1/chat/completions", json={"model": MODEL, "messages": [
            {"role": "user", "content": prepare(model_server, "tokens.raw.none", None)}]})
    assert said.json()["usage"] == {"prompt_tokens": 11, "completion_tokens": 30,
                                    "total_tokens": 41,
                                    "completion_tokens_details": {"reasoning_tokens": 7}}
    assert "completion_tokens_details" not in silent.json()["usage"]


@pytest.mark.parametrize("reported", [23, None], ids=["reported", "not-reported"])
async def test_the_native_usage_event_carries_the_reasoning_tokens(
    oa_gateway: InProcessGateway, model_server: ModelServer, reported: int | None
) -> None:
    ask = prepare(model_server, f"tokens.native.{reported}", reported)
    async with oa_gateway.client(await oa_gateway.api_key(f"native-{reported}")) as client:
        result = await post_turn(client, await new_thread(client), ask)
    usage = result.one("usage")
    assert (usage["completion_tokens"], usage["reasoning_tokens"]) == (30, reported)
    assert result.text == "Yes."


async def test_the_responses_api_reports_them_as_output_tokens_details(
    oa_gateway: InProcessGateway, model_server: ModelServer
) -> None:
    ask = prepare(model_server, "tokens.responses", 23)
    client = sdk(oa_gateway.url + "/v1", await oa_gateway.api_key("tokens-responses"))
    async with client:
        whole = await client.responses.create(model=MODEL, input=ask)
        stored = await client.responses.retrieve(whole.id)
    for response in (whole, stored):
        assert response.usage is not None
        assert response.usage.output_tokens_details.reasoning_tokens == 23
