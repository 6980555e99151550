"""The openai Python SDK's Responses API pointed at /v1: `responses.create` streamed and not,
and the `responses.stream` helper, get exactly the spec's clean text for every public
conformance case cut at random places, with its METADATA in `chatgate`; a tool call
round-trips; a `previous_response_id` chain of three turns is one thread; unknown `/v1`
routes are OpenAI's 404 for every method."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest

from tests.e2e.helpers import messages as thread_messages
from tests.support.gateway import InProcessGateway
from tests.support.http import sdk
from tests.turn.openai.cases import CASES, expected, prepare
from tests.turn.openai.model_server import ModelServer, answer_body, chunk
from tests.turn.openai.test_sdk import tool_call_body

MODEL = "scripted-1"
TOOLS: list[Any] = [{"type": "function", "name": "get_weather",
                     "description": "The weather in a city",
                     "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                    "required": ["city"]}}]


def ask(key: str) -> str:
    return f"[case:{key}] answer the case"


def chatgate(obj: Any) -> dict[str, Any]:
    ext: dict[str, Any] = (obj.model_extra or {})["chatgate"]
    return ext


async def client_of(gateway: InProcessGateway, user: str) -> openai.AsyncOpenAI:
    return sdk(gateway.url + "/v1", await gateway.api_key(user))


async def test_streamed_and_whole_responses_are_clean_for_every_case(
    oa_gateway: InProcessGateway, model_server: ModelServer
) -> None:
    async with await client_of(oa_gateway, "responses-sdk") as client:
        for case in CASES:
            key = prepare(model_server, case, "responses")
            events = [e async for e in await client.responses.create(
                model=MODEL, input=ask(key), stream=True, store=False)]
            text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
            assert [e.sequence_number for e in events] == list(range(len(events)))
            assert [e.type for e in events][:2] == ["response.created", "response.in_progress"]
            done = events[-1]
            assert done.type == "response.completed", case["id"]
            ext = chatgate(done.response)
            assert (text, ext["response_metadata"], ext["warnings"]) == expected(case), case["id"]
            assert done.response.output_text == case["text"]
            usage = done.response.usage
            assert usage is not None and (usage.input_tokens, usage.output_tokens) == (11, 7)
            assert usage.output_tokens_details.reasoning_tokens == 0
            whole = await client.responses.create(model=MODEL, input=[
                {"role": "user", "content": [{"type": "input_text", "text": ask(key)}]}])
            assert whole.output_text == case["text"], case["id"]
            assert chatgate(whole)["response_metadata"] == expected(case)[1]
            assert whole.status == "completed" and whole.usage is not None


async def test_the_stream_helper_gets_every_case_clean(
    oa_gateway: InProcessGateway, model_server: ModelServer
) -> None:
    async with await client_of(oa_gateway, "responses-helper") as client:
        for case in CASES:
            key = prepare(model_server, case, "helper")
            shown = []
            async with client.responses.stream(model=MODEL, input=ask(key),
                                               instructions="Be brief.", store=False) as stream:
                async for event in stream:
                    if event.type == "response.output_text.delta":
                        shown.append(event.delta)
                final = await stream.get_final_response()
            assert "".join(shown) == case["text"] == final.output_text, case["id"]
            assert chatgate(final)["response_metadata"] == expected(case)[1]


async def test_a_tool_call_round_trips_in_a_stored_thread(
    oa_gateway: InProcessGateway, model_server: ModelServer
) -> None:
    key = "responses-tool"
    model_server.bodies[key] = tool_call_body()
    model_server.bodies[f"{key}.after-tool"] = answer_body(
        ["It is sunny in Brno.", ' <!-- METADATA: {"language": "en"} -->'])
    async with await client_of(oa_gateway, "responses-tools") as client:
        events = [e async for e in await client.responses.create(
            model=MODEL, input=f"[case:{key}] weather in Brno?", tools=TOOLS, stream=True)]
        done = events[-1]
        assert done.type == "response.completed"
        [call] = [item for item in done.response.output if item.type == "function_call"]
        deltas = "".join(e.delta for e in events
                         if e.type == "response.function_call_arguments.delta")
        assert (call.name, call.call_id, json.loads(call.arguments)) == (
            "get_weather", "call_1", {"city": "Brno"})
        assert deltas == call.arguments
        final = await client.responses.create(
            model=MODEL, previous_response_id=done.response.id, tools=TOOLS,
            input=[{"type": "function_call_output", "call_id": call.call_id,
                    "output": '{"sky": "sunny"}'}])
    assert final.output_text == "It is sunny in Brno."
    assert chatgate(final)["response_metadata"] == {"language": "en"}
    first, second = model_server.requests_for(key)
    assert first["tools"] == [{"type": "function", "function": {
        k: TOOLS[0][k] for k in ("name", "description", "parameters")}}]
    assert second["messages"][-2]["tool_calls"][0]["id"] == "call_1"
    assert second["messages"][-1] == {"role": "tool", "tool_call_id": "call_1",
                                      "content": '{"sky": "sunny"}'}
    assert second["messages"][-3]["content"].startswith("<!-- MSG_CONTEXT: ")
    thread_id = chatgate(final)["thread_id"]
    assert thread_id == chatgate(done.response)["thread_id"]
    async with oa_gateway.client(await oa_gateway.api_key("responses-tools")) as native:
        rows = await thread_messages(native, thread_id)
    # the question once, the answer that was a tool call (its calls kept), the final answer
    assert [(r["role"], r["content"]) for r in rows] == [
        ("user", f"[case:{key}] weather in Brno?"), ("assistant", ""),
        ("assistant", "It is sunny in Brno.")]
    assert rows[1]["metadata"]["tool_calls"][0]["id"] == "call_1"


async def test_a_chain_of_three_is_one_thread_and_a_response_is_the_users_own(
    oa_gateway: InProcessGateway, model_server: ModelServer
) -> None:
    answers = ["Tides come twice a day.", "The moon pulls them.", "Spring tides are high."]
    for turn, answer in enumerate(answers):
        model_server.bodies[f"chain-{turn}"] = answer_body([answer])
    async with await client_of(oa_gateway, "responses-chain") as client:
        previous: str | None = None
        ids = []
        for turn in range(3):
            reply = await client.responses.create(
                model=MODEL, input=f"[case:chain-{turn}] question {turn}",
                **({"previous_response_id": previous} if previous else {}))
            assert reply.output_text == answers[turn]
            previous = reply.id
            ids.append(reply.id)
        stored = await client.responses.retrieve(ids[1])
        assert (stored.id, stored.output_text, stored.status) == (ids[1], answers[1],
                                                                  "completed")
        thread_id = chatgate(stored)["thread_id"]
    third = model_server.requests_for("chain-2")[0]["messages"][-1]["content"]
    context = json.loads(third.split("<!-- MSG_CONTEXT: ", 1)[1].split(" -->", 1)[0])
    assert [(h["role"], h["content"]) for h in context["history"]] == [
        ("user", "[case:chain-0] question 0"), ("assistant", answers[0]),
        ("user", "[case:chain-1] question 1"), ("assistant", answers[1])]
    assert all("time" in h for h in context["history"])
    async with oa_gateway.client(await oa_gateway.api_key("responses-chain")) as native:
        rows = await thread_messages(native, thread_id)
    assert [r["content"] for r in rows if r["role"] == "assistant"] == answers
    assert [f"resp_{r['id'].replace('-', '')}" for r in rows if r["role"] == "assistant"] == ids
    async with await client_of(oa_gateway, "someone-else") as other:
        with pytest.raises(openai.NotFoundError):
            await other.responses.retrieve(ids[0])
        with pytest.raises(openai.BadRequestError) as refused:
            await other.responses.create(model=MODEL, input="hi", previous_response_id=ids[0])
    assert refused.value.code == "previous_response_not_found"


async def test_store_false_keeps_only_the_usage(
    oa_gateway: InProcessGateway, model_server: ModelServer
) -> None:
    model_server.bodies["unstored"] = answer_body(["Not kept."])
    async with await client_of(oa_gateway, "responses-unstored") as client:
        reply = await client.responses.create(model=MODEL, input="[case:unstored] hi",
                                              store=False)
        assert reply.output_text == "Not kept."
        with pytest.raises(openai.NotFoundError):
            await client.responses.retrieve(reply.id)
    async with oa_gateway.client(await oa_gateway.api_key("responses-unstored")) as native:
        threads = (await native.get("/api/threads")).json()["threads"]
        usage = (await native.get("/api/usage")).json()
    assert threads == []
    assert usage["totals"]["total_tokens"] == 18


async def test_refusals_are_openai_errors(oa_gateway: InProcessGateway) -> None:
    async with await client_of(oa_gateway, "responses-refusals") as client:
        with pytest.raises(openai.NotFoundError) as missing:
            await client.responses.create(model="nope-1", input="hi")
        with pytest.raises(openai.BadRequestError) as bad:
            await client.responses.create(model=MODEL, input=[{"type": "web_search_call"}])
        with pytest.raises(openai.BadRequestError) as empty:
            await client.responses.create(model=MODEL, input="  ")
        with pytest.raises(openai.BadRequestError) as no_question:
            await client.responses.create(model=MODEL, input=[
                {"type": "function_call_output", "call_id": "c1", "output": "ok"}])
    assert missing.value.code == "model_not_found"
    assert (bad.value.body or {}).get("param") == "input[0].type"  # type: ignore[union-attr]
    assert empty.value.code == "invalid_request_error"
    assert (no_question.value.body or {}).get("param") == "input"  # type: ignore[union-attr]
    bad_key = sdk(oa_gateway.url + "/v1", "wrong")
    async with bad_key:
        with pytest.raises(openai.AuthenticationError):
            await bad_key.responses.create(model=MODEL, input="hi")
    async with oa_gateway.client(await oa_gateway.api_key("responses-refusals")) as native:
        threads = (await native.get("/api/threads")).json()["threads"]
    assert threads == []  # a refused request stores nothing, no empty thread either


@pytest.mark.parametrize("method", ["post", "put", "delete"])
async def test_an_unknown_v1_route_is_a_404_for_every_method(
    oa_gateway: InProcessGateway, method: str
) -> None:
    async with await client_of(oa_gateway, "unknown-routes") as client:
        send = getattr(client, method)
        with pytest.raises(openai.NotFoundError) as missing:
            await send("/no-such-route", cast_to=httpx.Response,
                       **({"body": {"x": 1}} if method != "delete" else {}))
    error = missing.value
    assert (error.code, error.type) == ("unknown_url", "invalid_request_error")
    async with oa_gateway.client(await oa_gateway.api_key("unknown-routes")) as raw:
        for verb in ("GET", "PATCH", "OPTIONS"):
            response = await raw.request(verb, "/v1/models/x/y/z/w", json={})
            body = response.json()["error"]
            assert (response.status_code, body["code"]) in {(404, "unknown_url"),
                                                            (404, "model_not_found")}
        response = await raw.request("POST", "/v1/models")
        assert (response.status_code, response.json()["error"]["code"]) == (404, "unknown_url")


async def test_params_map_to_the_chat_shape_and_a_cut_length_is_incomplete(
    oa_gateway: InProcessGateway, model_server: ModelServer
) -> None:
    model_server.bodies["long"] = answer_body(["Half an ans"], finish="length")
    async with await client_of(oa_gateway, "responses-params") as client:
        reply = await client.responses.create(
            model=MODEL, input="[case:long] a long one", instructions="Answer <!-- briefly.",
            max_output_tokens=5, temperature=0.2, store=False)
    assert (reply.status, reply.output_text) == ("incomplete", "Half an ans")
    assert reply.incomplete_details is not None
    assert reply.incomplete_details.reason == "max_output_tokens"
    [sent] = model_server.requests_for("long")
    assert (sent["max_tokens"], sent["temperature"]) == (5, 0.2)
    assert "max_output_tokens" not in sent and "instructions" not in sent
    # the instructions are the client's system message, escaped as chat completions' are
    assert sent["messages"][1] == {"role": "system", "content": "Answer &lt;!-- briefly."}


async def test_a_model_server_failure_is_a_5xx_or_a_failed_response(
    oa_gateway: InProcessGateway, model_server: ModelServer
) -> None:
    model_server.bodies["cut"] = raw_cut("partial <!-- MET")
    async with await client_of(oa_gateway, "responses-cut") as client:
        with pytest.raises(openai.InternalServerError) as whole:
            await client.responses.create(model=MODEL, input="[case:cut] x")
        events = [e async for e in await client.responses.create(
            model=MODEL, input="[case:cut] x", stream=True)]
    assert whole.value.status_code == 502 and whole.value.code == "upstream_truncated"
    failed = events[-1]
    assert failed.type == "response.failed"
    assert failed.response.error is not None
    assert failed.response.error.code == "upstream_truncated"
    shown = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert shown == "partial <!-- MET"  # what the filter held is resolved, nothing hidden
    stored = chatgate(failed.response)
    assert stored["stored"] is True  # kept failed in its thread, as a native turn is


async def test_the_daily_budget_refuses_in_openai_terms(
    oa_gateway: InProcessGateway, model_server: ModelServer
) -> None:
    model_server.bodies["budget"] = answer_body(["Spent."])
    key = await oa_gateway.api_key("responses-budget", tokens=10)
    async with sdk(oa_gateway.url + "/v1", key) as client:
        first = await client.responses.create(model=MODEL, input="[case:budget] x")
        with pytest.raises(openai.RateLimitError) as refused:
            await client.responses.create(model=MODEL, input="[case:budget] again",
                                          previous_response_id=first.id)
        with pytest.raises(openai.RateLimitError):
            await client.responses.create(model=MODEL, input="[case:budget] new thread")
    assert refused.value.code == "insufficient_quota"
    assert refused.value.response.headers.get("retry-after")
    async with oa_gateway.client(key) as native:
        threads = (await native.get("/api/threads?origin=responses")).json()["threads"]
    assert [t["message_count"] for t in threads] == [2]  # nothing of the refused ones


def raw_cut(text: str) -> bytes:
    """A body that breaks off after some text: no finish, no [DONE]."""
    return f"data: {chunk([{'index': 0, 'delta': {'content': text}}])}\n\n".encode()


async def test_reasoning_items_sent_back_never_reach_the_model(
    oa_gateway: InProcessGateway, model_server: ModelServer
) -> None:
    """A client that manages its own context sends the whole output back, the reasoning
    item included (as OpenAI asks): the model server is never shown the thinking."""
    from tests.stream.test_reasoning_conformance import CASES as THINKING
    from tests.turn.openai import test_reasoning_surfaces as surfaces

    [case] = [c for c in THINKING if c["id"] == "r-basic"]
    key = surfaces.prepare(model_server, case, "echoed")
    async with await client_of(oa_gateway, "responses-echo") as client:
        first = await client.responses.create(model=MODEL, input=ask(key), store=False)
        assert first.output[0].type == "reasoning"
        model_server.bodies["echo-next"] = answer_body(["Fine."])
        second = await client.responses.create(model=MODEL, store=False, input=[
            {"role": "user", "content": ask(key)},
            *[item.model_dump(exclude_none=True) for item in first.output],
            {"role": "user", "content": "[case:echo-next] and now?"}])  # type: ignore[list-item]
    assert second.output_text == "Fine."
    [request] = model_server.requests_for("echo-next")
    assert case["reasoning"] not in json.dumps(request)
    assert "Hello!" in json.dumps(request)  # the earlier answer itself is there
