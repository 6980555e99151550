"""The openai Python SDK, sync and async, streaming and not, pointed at /v1: every public
conformance case cut at random chunk boundaries comes out as exactly the spec's clean text,
with its METADATA in the `chatgate` extension; a tool call round-trips; usage comes back."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import openai
import pytest

from tests.support.gateway import InProcessGateway
from tests.support.http import sdk
from tests.support.scripted_upstream import usage_chunk
from tests.turn.openai.cases import CASES, ask, expected, prepare
from tests.turn.openai.model_server import ModelServer, answer_body, chunk, raw_body

MODEL = "scripted-1"


def extension(obj: Any) -> dict[str, Any]:
    ext: dict[str, Any] = (obj.model_extra or {})["chatgate"]
    return ext


def streamed(chunks: list[Any]) -> tuple[str, Any, list[str]]:
    """What a client shows of a stream: the text of choice 0, and the extension of the
    chunk that carries it."""
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    [ext] = [extension(c) for c in chunks if c.choices and "chatgate" in (c.model_extra or {})]
    return text, ext["response_metadata"], ext["warnings"]


async def test_async_client_streams_every_case_clean(
    oa_gateway: InProcessGateway, model_server: ModelServer
) -> None:
    client = sdk(oa_gateway.url + "/v1", await oa_gateway.api_key("async-sdk"))
    async with client:
        for case in CASES:
            key = prepare(model_server, case, "async-stream")
            stream = await client.chat.completions.create(
                model=MODEL, messages=ask(key), stream=True,
                stream_options={"include_usage": True})
            chunks = [c async for c in stream]
            assert streamed(chunks) == expected(case), case["id"]
            assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens == 18
            whole = await client.chat.completions.create(model=MODEL, messages=ask(key))
            assert whole.choices[0].message.content == case["text"], case["id"]
            assert extension(whole)["response_metadata"] == expected(case)[1]


def test_sync_client_streams_every_case_clean(
    oa_gateway: InProcessGateway, model_server: ModelServer
) -> None:
    key_of_user = asyncio.run(_key(oa_gateway, "sync-sdk"))
    with openai.OpenAI(base_url=oa_gateway.url + "/v1", api_key=key_of_user,
                       max_retries=0) as client:
        for case in CASES:
            key = prepare(model_server, case, "sync")
            chunks = list(client.chat.completions.create(model=MODEL, messages=ask(key),
                                                         stream=True))
            assert streamed(chunks) == expected(case), case["id"]
            assert all(c.usage is None for c in chunks)  # not asked for
            whole = client.chat.completions.create(model=MODEL, messages=ask(key))
            assert whole.choices[0].message.content == case["text"], case["id"]
            assert whole.usage is not None and whole.usage.prompt_tokens == 11


async def _key(gateway: InProcessGateway, user: str) -> str:
    return await gateway.api_key(user)


def tool_call_body() -> bytes:
    """A model asking for get_weather({"city": "Brno"}), its arguments cut in three."""
    calls = [{"index": 0, "id": "call_1", "type": "function",
              "function": {"name": "get_weather", "arguments": ""}},
             {"index": 0, "function": {"arguments": '{"city"'}},
             {"index": 0, "function": {"arguments": ': "Br'}},
             {"index": 0, "function": {"arguments": 'no"}'}}]
    events = [chunk([{"index": 0, "delta": {"role": "assistant", "content": None}}])]
    events += [chunk([{"index": 0, "delta": {"tool_calls": [c]}, "finish_reason": None}])
               for c in calls]
    events += [chunk([{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]),
               usage_chunk(20, 9, 29)]
    return raw_body(events)


TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}]


@pytest.mark.parametrize("stream", [False, True])
async def test_a_tool_call_round_trips(
    oa_gateway: InProcessGateway, model_server: ModelServer, stream: bool
) -> None:
    key = f"tool-{stream}"
    model_server.bodies[key] = tool_call_body()
    model_server.bodies[f"{key}.after-tool"] = answer_body(
        ["It is sunny in Brno.", ' <!-- METADATA: {"language": "en"} -->'])
    client = sdk(oa_gateway.url + "/v1", await oa_gateway.api_key("tools"))
    messages: list[Any] = [{"role": "user", "content": f"[case:{key}] weather in Brno?"}]
    async with client:
        if stream:
            chunks = [c async for c in await client.chat.completions.create(
                model=MODEL, messages=messages, tools=TOOLS, tool_choice="auto", stream=True)]
            parts = [tc for c in chunks if c.choices for tc in c.choices[0].delta.tool_calls or []]
            arguments = "".join(p.function.arguments or "" for p in parts if p.function)
            name = parts[0].function.name if parts[0].function else None
            call_id = parts[0].id
            assert chunks[-1].choices[0].finish_reason == "tool_calls"
        else:
            reply = await client.chat.completions.create(
                model=MODEL, messages=messages, tools=TOOLS, tool_choice="auto")
            [call] = reply.choices[0].message.tool_calls or []
            assert reply.choices[0].finish_reason == "tool_calls"
            assert call.type == "function"
            arguments, name, call_id = call.function.arguments, call.function.name, call.id
        assert (json.loads(arguments), name, call_id) == ({"city": "Brno"}, "get_weather",
                                                          "call_1")
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": call_id, "type": "function",
                 "function": {"name": name, "arguments": arguments}}]},
            {"role": "tool", "tool_call_id": call_id, "content": '{"sky": "sunny"}'},
        ]
        final = await client.chat.completions.create(model=MODEL, messages=messages,
                                                     tools=TOOLS)
    assert final.choices[0].message.content == "It is sunny in Brno."
    assert extension(final)["response_metadata"] == {"language": "en"}
    first, second = model_server.requests_for(key)
    assert first["tools"] == TOOLS and first["tool_choice"] == "auto"
    assert second["tools"] == TOOLS
    # the tool round passes as messages, untouched, after the user's question
    assert second["messages"][-2:] == messages[-2:]
    assert second["messages"][-3]["role"] == "user"
    assert second["messages"][-3]["content"].startswith("<!-- MSG_CONTEXT: ")
