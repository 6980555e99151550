"""Every public inline tool call case on /v1, over real HTTP from a model server that writes the
calls into its text (as vLLM without a tool parser passes them on), cut at random places, on
a gateway with CHATGATE_TOOL_FORMAT=hermes: with tools offered, the real openai SDK streams
each call as a `tool_calls` delta and finishes with `tool_calls`, returns
`message.tool_calls` when not streamed, and the Responses API gives `function_call` items
with their events; without tools offered, the text alone and `tool_call_unrequested`. The
stored answer keeps its calls, so a thread's next request sends them back and a tool result
round-trips; a model server's own tool_calls deltas pass through as before."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.e2e.helpers import messages as thread_messages
from tests.e2e.helpers import new_thread
from tests.stream.streaming import random_pieces
from tests.stream.test_tools_conformance import CASES
from tests.support.gateway import GatewayPool, InProcessGateway
from tests.support.gateway.sse import post_turn
from tests.support.http import sdk
from tests.support.scripted_upstream import completion_chunk, finish_chunk, usage_chunk
from tests.turn.openai.model_server import ModelServer, answer_body, raw_body
from tests.turn.openai.test_responses_sdk import chatgate
from tests.turn.openai.test_sdk import tool_call_body

MODEL = "scripted-1"
HERMES = [c for c in CASES if c["tool_format"] == "hermes"]
IDS = [c["id"] for c in HERMES]
TOOLS: list[Any] = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
RESPONSES_TOOLS: list[Any] = [{"type": "function", "name": "get_weather",
                               "parameters": TOOLS[0]["function"]["parameters"]}]


@pytest.fixture(scope="module")
def hermes_gateway(live_backend: str, model_server: ModelServer,
                   live_log_dir: Path) -> Iterator[InProcessGateway]:
    with GatewayPool(live_log_dir) as pool:
        yield pool.start(live_backend, upstream=model_server.base_url, env={
            "CHATGATE_TITLE_CALLS": "false", "CHATGATE_SUMMARY_CALLS": "false",
            "CHATGATE_RATE_LIMIT_PER_MINUTE": "0", "CHATGATE_UPSTREAM_MODEL": MODEL,
            "CHATGATE_FIRST_TOKEN_TIMEOUT_S": "10", "CHATGATE_TOOL_FORMAT": "hermes",
        })


def prepare(server: ModelServer, case: dict[str, Any], salt: str) -> str:
    """The case's output as a model server streams it, cut at random (seeded) places."""
    key = f"{case['id']}.{salt}"
    pieces = random_pieces(case["input"], random.Random(key), 6)
    events = [completion_chunk(piece) for piece in pieces]
    events += [finish_chunk("stop"), usage_chunk(11, 7, 18)]
    server.bodies[key] = raw_body(events)
    return key


def ask(key: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"[case:{key}] what is the weather?"}]


def calls_of(case: dict[str, Any]) -> list[tuple[str, str]]:
    return [(c["name"], c["arguments"]) for c in case["tool_calls"]]


async def sdk_of(gateway: InProcessGateway, user: str) -> openai.AsyncOpenAI:
    return sdk(gateway.url + "/v1", await gateway.api_key(user))


async def test_chat_completions_stream_each_call_with_the_sdk(
    hermes_gateway: InProcessGateway, model_server: ModelServer
) -> None:
    async with await sdk_of(hermes_gateway, "tools-stream") as client:
        for case in HERMES:
            key = prepare(model_server, case, "stream")
            stream = await client.chat.completions.create(
                model=MODEL, messages=ask(key), tools=TOOLS, stream=True)  # type: ignore
            chunks = [c async for c in stream]
            deltas = [c.choices[0].delta for c in chunks if c.choices]
            text = "".join(d.content or "" for d in deltas)
            pieces = [call for d in deltas for call in d.tool_calls or ()]
            # each call whole in one delta: its id, type, name and all of its arguments
            assert [(p.function.name, p.function.arguments) for p in pieces if p.function] == (
                calls_of(case)), case["id"]
            assert all(p.id and p.id.startswith("call_") and p.type == "function"
                       for p in pieces), case["id"]
            assert [p.index for p in pieces] == list(range(len(pieces)))
            assert len({p.id for p in pieces}) == len(pieces)
            assert text == case["text"], case["id"]
            finish = [c.choices[0].finish_reason for c in chunks if c.choices][-1]
            assert finish == ("tool_calls" if case["tool_calls"] else "stop"), case["id"]
            ext = next((c.model_extra or {})["chatgate"] for c in chunks
                       if "chatgate" in (c.model_extra or {}))
            assert ext["warnings"] == case["warnings"], case["id"]
            assert ext["response_metadata"] == (case["metadata"] or {}), case["id"]


async def test_chat_completions_return_message_tool_calls_with_the_sdk(
    hermes_gateway: InProcessGateway, model_server: ModelServer
) -> None:
    async with await sdk_of(hermes_gateway, "tools-whole") as client:
        for case in HERMES:
            key = prepare(model_server, case, "whole")
            whole = await client.chat.completions.create(
                model=MODEL, messages=ask(key), tools=TOOLS)  # type: ignore[arg-type]
            [choice] = whole.choices
            calls = choice.message.tool_calls or []
            assert [(c.function.name, c.function.arguments) for c in calls  # type: ignore
                    ] == calls_of(case), case["id"]
            assert all(c.id.startswith("call_") and c.type == "function" for c in calls)
            assert choice.message.content == (
                case["text"] or (None if calls else "")), case["id"]
            assert choice.finish_reason == ("tool_calls" if calls else "stop"), case["id"]
            assert (whole.model_extra or {})["chatgate"]["warnings"] == case["warnings"]


async def test_responses_give_function_call_items_with_their_events(
    hermes_gateway: InProcessGateway, model_server: ModelServer
) -> None:
    async with await sdk_of(hermes_gateway, "tools-responses") as client:
        for case in HERMES:
            key = prepare(model_server, case, "responses")
            events = [e async for e in await client.responses.create(
                model=MODEL, input=ask(key)[0]["content"], tools=RESPONSES_TOOLS,
                stream=True, store=False)]
            done = events[-1]
            assert done.type == "response.completed", case["id"]
            items = [i for i in done.response.output if i.type == "function_call"]
            assert [(i.name, i.arguments) for i in items] == calls_of(case), case["id"]
            assert all(i.call_id.startswith("call_") for i in items)
            added = [e.item for e in events if e.type == "response.output_item.added"
                     and e.item.type == "function_call"]
            argument_done = [e.arguments for e in events
                             if e.type == "response.function_call_arguments.done"]
            assert [i.name for i in added] == [name for name, _ in calls_of(case)]
            assert argument_done == [arguments for _, arguments in calls_of(case)]
            assert done.response.output_text == case["text"], case["id"]
            assert chatgate(done.response)["warnings"] == case["warnings"], case["id"]

            whole = await client.responses.create(
                model=MODEL, input=ask(key)[0]["content"], tools=RESPONSES_TOOLS, store=False)
            items = [i for i in whole.output if i.type == "function_call"]
            assert [(i.name, i.arguments) for i in items] == calls_of(case), case["id"]
            assert whole.output_text == case["text"], case["id"]


async def test_without_tools_offered_the_text_alone_and_a_warning(
    hermes_gateway: InProcessGateway, model_server: ModelServer
) -> None:
    async with await sdk_of(hermes_gateway, "tools-unrequested") as client:
        for case in HERMES:
            key = prepare(model_server, case, "unrequested")
            whole = await client.chat.completions.create(
                model=MODEL, messages=ask(key))  # type: ignore[arg-type]
            [choice] = whole.choices
            assert choice.message.tool_calls is None, case["id"]
            assert (choice.message.content, choice.finish_reason) == (case["text"], "stop")
            warnings = (whole.model_extra or {})["chatgate"]["warnings"]
            assert [w for w in warnings if w != "tool_call_unrequested"] == case["warnings"]
            assert warnings.count("tool_call_unrequested") == (1 if case["tool_calls"] else 0)


async def test_the_native_api_shows_the_text_alone(
    hermes_gateway: InProcessGateway, model_server: ModelServer
) -> None:
    [case] = [c for c in HERMES if c["id"] == "t-text-then-call"]
    key = prepare(model_server, case, "native")
    async with hermes_gateway.client(await hermes_gateway.api_key("tools-native")) as client:
        thread_id = await new_thread(client)
        result = await post_turn(client, thread_id, ask(key)[0]["content"])
        stored = (await thread_messages(client, thread_id))[-1]
    assert result.text == stored["content"] == "Let me check the weather."
    assert "tool_calls" not in (stored["metadata"] or {})


async def test_a_stored_inline_call_goes_back_to_the_model_and_its_result_round_trips(
    hermes_gateway: InProcessGateway, model_server: ModelServer
) -> None:
    """Responses: the call is stored with the answer; the next request in the thread sends
    it back as the assistant's tool_calls, with the tool result after it."""
    key = "inline-round-trip"
    model_server.bodies[key] = raw_body([
        completion_chunk("Checking.\n<tool_call>\n{\"name\": \"get_weather\", "),
        completion_chunk("\"arguments\": {\"city\": \"Brno\"}}\n</tool_call>"),
        finish_chunk("stop"), usage_chunk(11, 7, 18)])
    model_server.bodies[f"{key}.after-tool"] = answer_body(["It is sunny in Brno."])
    async with await sdk_of(hermes_gateway, "tools-round-trip") as client:
        first = await client.responses.create(
            model=MODEL, input=f"[case:{key}] weather in Brno?", tools=RESPONSES_TOOLS)
        [call] = [i for i in first.output if i.type == "function_call"]
        assert (call.name, json.loads(call.arguments)) == ("get_weather", {"city": "Brno"})
        final = await client.responses.create(
            model=MODEL, previous_response_id=first.id, tools=RESPONSES_TOOLS,
            input=[{"type": "function_call_output", "call_id": call.call_id,
                    "output": '{"sky": "sunny"}'}])
    assert final.output_text == "It is sunny in Brno."
    second = model_server.requests_for(key)[-1]
    assistant, tool = second["messages"][-2:]
    assert assistant["tool_calls"] == [{"id": call.call_id, "type": "function", "function": {
        "name": "get_weather", "arguments": '{"city": "Brno"}'}}]
    assert tool == {"role": "tool", "tool_call_id": call.call_id, "content": '{"sky": "sunny"}'}
    assert "<tool_call>" not in json.dumps(second["messages"])
    thread_id = chatgate(final)["thread_id"]
    async with hermes_gateway.client(await hermes_gateway.api_key("tools-round-trip")) as native:
        rows = await thread_messages(native, thread_id)
    assert rows[1]["content"] == "Checking."
    assert rows[1]["metadata"]["tool_calls"][0]["id"] == call.call_id


async def test_chat_completions_round_trip_a_tool_result(
    hermes_gateway: InProcessGateway, model_server: ModelServer
) -> None:
    """The client sends the call back with its result: the model server gets both."""
    key = "inline-chat-round-trip"
    model_server.bodies[key] = raw_body([
        completion_chunk("<tool_call>{\"name\": \"get_weather\", \"arguments\": "
                         "{\"city\": \"Brno\"}}</tool_call>"),
        finish_chunk("stop"), usage_chunk(11, 7, 18)])
    model_server.bodies[f"{key}.after-tool"] = answer_body(["Sunny."])
    async with await sdk_of(hermes_gateway, "tools-chat-round-trip") as client:
        messages: list[Any] = [{"role": "user", "content": f"[case:{key}] weather?"}]
        first = await client.chat.completions.create(model=MODEL, messages=messages,
                                                     tools=TOOLS)
        message = first.choices[0].message
        [call] = message.tool_calls or []
        messages += [message.model_dump(exclude_none=True),
                     {"role": "tool", "tool_call_id": call.id, "content": "sunny"}]
        final = await client.chat.completions.create(model=MODEL, messages=messages,
                                                     tools=TOOLS)
    assert final.choices[0].message.content == "Sunny."
    second = model_server.requests_for(key)[-1]
    assert second["messages"][-2]["tool_calls"][0]["id"] == call.id
    assert second["messages"][-1]["tool_call_id"] == call.id


async def test_a_model_servers_own_tool_calls_pass_through(
    hermes_gateway: InProcessGateway, model_server: ModelServer
) -> None:
    key = "native-tool-deltas"
    model_server.bodies[key] = tool_call_body()
    async with await sdk_of(hermes_gateway, "tools-native-deltas") as client:
        whole = await client.chat.completions.create(
            model=MODEL, messages=ask(key), tools=TOOLS)  # type: ignore[arg-type]
    [call] = whole.choices[0].message.tool_calls or []
    assert (call.id, call.function.name, call.function.arguments) == (  # type: ignore
        "call_1", "get_weather", '{"city": "Brno"}')
    assert whole.choices[0].finish_reason == "tool_calls"


async def test_without_the_format_a_call_is_text_as_before(
    oa_gateway: InProcessGateway, model_server: ModelServer
) -> None:
    """The `none` case on a gateway with the default format: the call stays text, with tools
    offered or not, streamed or whole."""
    [case] = [c for c in CASES if c["tool_format"] == "none"]
    key = prepare(model_server, case, "format-none")
    async with await sdk_of(oa_gateway, "tools-none") as client:
        stream = await client.chat.completions.create(
            model=MODEL, messages=ask(key), tools=TOOLS, stream=True)  # type: ignore
        chunks = [c async for c in stream]
        deltas = [c.choices[0].delta for c in chunks if c.choices]
        assert "".join(d.content or "" for d in deltas) == case["text"]
        assert not any(d.tool_calls for d in deltas)
        whole = await client.chat.completions.create(
            model=MODEL, messages=ask(key), tools=TOOLS)  # type: ignore[arg-type]
        assert (whole.choices[0].message.content, whole.choices[0].message.tool_calls,
                whole.choices[0].finish_reason) == (case["text"], None, "stop")
        response = await client.responses.create(
            model=MODEL, input=ask(key)[0]["content"], tools=RESPONSES_TOOLS, store=False)
        assert response.output_text == case["text"]
        assert not [i for i in response.output if i.type == "function_call"]
