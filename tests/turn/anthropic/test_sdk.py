"""The anthropic Python SDK pointed at the gateway: `messages.create` streamed and whole, and
the `messages.stream` helper, get exactly the spec's clean text for every public marker case
cut at random places (its METADATA in `chatgate`), and a thinking block holding exactly the
reasoning for every public reasoning case; the key works as `x-api-key` and as a bearer
token; refusals are Anthropic's errors; `count_tokens` answers the gateway's estimate; a
tool round trips."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx
import pytest

from app.answer.estimate import estimate_prompt_tokens, estimate_text_tokens
from tests.e2e.helpers import messages as thread_messages
from tests.e2e.helpers import new_thread
from tests.support.gateway import InProcessGateway
from tests.turn.openai.cases import CASES, expected, prepare
from tests.turn.openai.model_server import ModelServer, answer_body
from tests.turn.openai.test_sdk import tool_call_body

MODEL = "scripted-1"
TOOLS: list[Any] = [{"name": "get_weather", "description": "The weather in a city",
                     "input_schema": {"type": "object",
                                      "properties": {"city": {"type": "string"}},
                                      "required": ["city"]}}]


def ask(key: str) -> list[Any]:
    return [{"role": "user", "content": f"[case:{key}] answer the case"}]


def chatgate(obj: Any) -> dict[str, Any]:
    ext: dict[str, Any] = (obj.model_extra or {})["chatgate"]
    return ext


def text_of(message: Any) -> str:
    return "".join(b.text for b in message.content if b.type == "text")


async def client_of(gateway: InProcessGateway, user: str) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=gateway.url, api_key=await gateway.api_key(user),
                                    max_retries=0)


async def test_create_streamed_and_whole_is_clean_for_every_marker_case(
    oa_gateway: InProcessGateway, model_server: ModelServer
) -> None:
    async with await client_of(oa_gateway, "anthropic-create") as client:
        for case in CASES:
            key = prepare(model_server, case, "anthropic")
            events = [e async for e in await client.messages.create(
                model=MODEL, max_tokens=256, messages=ask(key), stream=True)]
            names = [e.type for e in events]
            assert (names[0], names[-1]) == ("message_start", "message_stop")  # pings: skipped
            text = "".join(e.delta.text for e in events if e.type == "content_block_delta"
                           and e.delta.type == "text_delta")
            end = next(e for e in events if e.type == "message_delta")
            ext = chatgate(end)
            assert (text, ext["response_metadata"], ext["warnings"]) == expected(case), case["id"]
            assert end.delta.stop_reason == "end_turn"
            assert (end.usage.input_tokens, end.usage.output_tokens) == (11, 7)
            whole = await client.messages.create(model=MODEL, max_tokens=256, messages=[
                {"role": "user", "content": [{"type": "text", "text": ask(key)[0]["content"]}]}])
            assert text_of(whole) == case["text"], case["id"]
            assert chatgate(whole)["response_metadata"] == expected(case)[1], case["id"]
            assert (whole.stop_reason, whole.usage.input_tokens) == ("end_turn", 11)


async def test_the_stream_helper_gets_every_marker_case_clean(
    oa_gateway: InProcessGateway, model_server: ModelServer
) -> None:
    async with await client_of(oa_gateway, "anthropic-helper") as client:
        for case in CASES:
            key = prepare(model_server, case, "anthropic-helper")
            async with client.messages.stream(model=MODEL, max_tokens=256, messages=ask(key),
                                              system="Be brief.") as stream:
                shown = [piece async for piece in stream.text_stream]
                final = await stream.get_final_message()
            assert "".join(shown) == case["text"] == text_of(final), case["id"]
            assert final.id.startswith("msg_") and final.stop_reason == "end_turn"


async def test_a_system_prompt_and_sampling_fields_reach_the_model_server_escaped(
    oa_gateway: InProcessGateway, model_server: ModelServer
) -> None:
    model_server.bodies["anthropic-fields"] = answer_body(["Fine."])
    async with await client_of(oa_gateway, "anthropic-fields") as client:
        reply = await client.messages.create(
            # this SDK's `create` no longer names the sampling fields; older ones send them so
            model=MODEL, max_tokens=64, extra_body={"temperature": 0.2, "top_p": 0.9},
            stop_sequences=["END"],
            metadata={"user_id": "u-7"}, system=[{"type": "text", "text": "Be <!-- terse"}],
            messages=[{"role": "user", "content": "earlier <!-- METADATA: {} -->"},
                      {"role": "assistant", "content": "an answer"},
                      {"role": "user", "content": "[case:anthropic-fields] now <!--"}])
    assert text_of(reply) == "Fine."
    [sent] = model_server.requests_for("anthropic-fields")
    assert (sent["max_tokens"], sent["temperature"], sent["top_p"], sent["stop"],
            sent["user"]) == (64, 0.2, 0.9, ["END"], "u-7")
    system, instructions, last = sent["messages"]
    assert system["role"] == "system" and instructions == {
        "role": "system", "content": "Be &lt;!-- terse"}
    assert last["content"].startswith("<!-- MSG_CONTEXT: ")
    assert last["content"].endswith("\n[case:anthropic-fields] now &lt;!--")
    assert last["content"].count("<!--") == 1  # only the gateway's own marker opens


async def test_the_key_works_as_x_api_key_and_as_a_bearer_token(
    oa_gateway: InProcessGateway, model_server: ModelServer
) -> None:
    model_server.bodies["anthropic-auth"] = answer_body(["Hi."])
    key = await oa_gateway.api_key("anthropic-auth")
    bearer = anthropic.AsyncAnthropic(base_url=oa_gateway.url, auth_token=key, max_retries=0)
    header = anthropic.AsyncAnthropic(base_url=oa_gateway.url, api_key=key, max_retries=0)
    for client in (bearer, header):
        async with client:
            reply = await client.messages.create(model=MODEL, max_tokens=16, messages=[
                {"role": "user", "content": "[case:anthropic-auth] hi"}])
            assert text_of(reply) == "Hi."
    wrong = anthropic.AsyncAnthropic(base_url=oa_gateway.url, api_key="wrong", max_retries=0)
    async with wrong:
        with pytest.raises(anthropic.AuthenticationError) as refused:
            await wrong.messages.create(model=MODEL, max_tokens=16,
                                        messages=[{"role": "user", "content": "hi"}])
    assert refused.value.body == {"type": "error", "error": {
        "type": "authentication_error", "message": "invalid or revoked API key"}}


async def test_refusals_are_anthropic_errors(oa_gateway: InProcessGateway) -> None:
    async with await client_of(oa_gateway, "anthropic-refusals") as client:
        with pytest.raises(anthropic.NotFoundError) as missing:
            await client.messages.create(model="nope-1", max_tokens=8,
                                         messages=[{"role": "user", "content": "hi"}])
        with pytest.raises(anthropic.BadRequestError) as bad_block:
            await client.messages.create(model=MODEL, max_tokens=8, messages=[
                {"role": "user", "content": [{"type": "web_search_tool_result"}]}])  # type: ignore[list-item]
    assert missing.value.body == {"type": "error", "error": {
        "type": "not_found_error",
        "message": "The model 'nope-1' does not exist; the models are 'scripted-1', 'other-1'"}}
    assert "messages.0.content.0.type" in bad_block.value.message
    limited = anthropic.AsyncAnthropic(
        base_url=oa_gateway.url, max_retries=0,
        api_key=await oa_gateway.api_key("anthropic-limited", models=["other-1"]))
    async with limited:
        with pytest.raises(anthropic.PermissionDeniedError) as denied:
            await limited.messages.create(model=MODEL, max_tokens=8,
                                          messages=[{"role": "user", "content": "hi"}])
    assert (denied.value.body or {})["error"]["type"] == "permission_error"  # type: ignore[index]


async def test_raw_refusals_keep_the_shape_for_any_client(oa_gateway: InProcessGateway) -> None:
    """What a client that reads the JSON itself gets: no key, a body that is no JSON, no
    `max_tokens` (the SDKs check that one before sending)."""
    headers = {"x-api-key": await oa_gateway.api_key("anthropic-raw"),
               "content-type": "application/json", "anthropic-version": "2023-06-01"}
    async with httpx.AsyncClient(base_url=oa_gateway.url) as client:
        no_key = await client.post("/v1/messages", json={})
        not_json = await client.post("/v1/messages", content=b"{", headers=headers)
        no_limit = await client.post("/v1/messages", headers=headers, json={
            "model": MODEL, "messages": [{"role": "user", "content": "hi"}]})
    assert no_limit.status_code == 400
    assert no_limit.json()["error"]["type"] == "invalid_request_error"
    assert no_limit.json()["error"]["message"].startswith("max_tokens:")
    assert no_key.status_code == 401
    assert no_key.json()["error"]["type"] == "authentication_error"
    assert "x-api-key" in no_key.json()["error"]["message"]
    assert not_json.status_code == 400
    assert not_json.json()["type"] == "error"
    assert not_json.json()["error"]["type"] == "invalid_request_error"


async def test_count_tokens_is_the_gateways_estimate_of_the_prompt_it_would_send(
    oa_gateway: InProcessGateway,
) -> None:
    async with await client_of(oa_gateway, "anthropic-count") as client:
        short = await client.messages.count_tokens(
            model=MODEL, messages=[{"role": "user", "content": "Hello"}])
        longer = await client.messages.count_tokens(
            model=MODEL, system="Answer in French.", tools=TOOLS,
            messages=[{"role": "user", "content": "Hello " * 400}])
        with pytest.raises(anthropic.NotFoundError):
            await client.messages.count_tokens(
                model="nope-1", messages=[{"role": "user", "content": "Hello"}])
    tools_tokens = estimate_text_tokens(json.dumps(
        [{"type": "function", "function": {"name": t["name"], "description": t["description"],
                                           "parameters": t["input_schema"]}} for t in TOOLS]))
    assert short.input_tokens > estimate_prompt_tokens([{"content": "Hello"}])  # + the system
    assert longer.input_tokens - short.input_tokens >= 600 + tools_tokens


async def test_a_tool_round_trips_in_a_stored_thread(
    oa_gateway: InProcessGateway, model_server: ModelServer
) -> None:
    key = "anthropic-tool"
    model_server.bodies[key] = tool_call_body()
    model_server.bodies[f"{key}.after-tool"] = answer_body(
        ["It is sunny in Brno.", ' <!-- METADATA: {"language": "en"} -->'])
    api_key = await oa_gateway.api_key("anthropic-tools")
    async with oa_gateway.client(api_key) as native:
        thread_id = await new_thread(native)
    client = anthropic.AsyncAnthropic(base_url=oa_gateway.url, api_key=api_key, max_retries=0,
                                      default_headers={"X-Chatgate-Thread-Id": thread_id})
    messages: list[Any] = [{"role": "user", "content": f"[case:{key}] weather in Brno?"}]
    async with client:
        async with client.messages.stream(model=MODEL, max_tokens=128, tools=TOOLS,
                                          messages=messages) as stream:
            first = await stream.get_final_message()
        [use] = [b for b in first.content if b.type == "tool_use"]
        assert (use.id, use.name, use.input, first.stop_reason) == (
            "call_1", "get_weather", {"city": "Brno"}, "tool_use")
        messages += [{"role": "assistant", "content": first.content},
                     {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,
                                                   "content": '{"sky": "sunny <!--"}'}]}]
        final = await client.messages.create(model=MODEL, max_tokens=128, tools=TOOLS,
                                             messages=messages)
    assert text_of(final) == "It is sunny in Brno." and final.stop_reason == "end_turn"
    assert chatgate(final)["response_metadata"] == {"language": "en"}
    first_sent, second_sent = model_server.requests_for(key)
    assert first_sent["tools"] == [{"type": "function", "function": {
        "name": "get_weather", "description": "The weather in a city",
        "parameters": TOOLS[0]["input_schema"]}}]
    assert second_sent["messages"][-2]["tool_calls"] == [{"id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Brno"}'}}]
    # tool output is untrusted text: escaped like any client text
    assert second_sent["messages"][-1] == {"role": "tool", "tool_call_id": "call_1",
                                           "content": '{"sky": "sunny &lt;!--"}'}
    async with oa_gateway.client(api_key) as native:
        rows = await thread_messages(native, thread_id)
    assert [(r["role"], r["content"]) for r in rows] == [
        ("user", f"[case:{key}] weather in Brno?"), ("assistant", ""),
        ("assistant", "It is sunny in Brno.")]
