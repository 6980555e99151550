"""/v1/chat/completions on the wire: OpenAI's chunk and error shapes, one filter per choice,
the history the model is sent, what passes through, usage in the rollups, storage in a
thread (seen by the native API), and the refusals."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from app.stream import strip_markers
from app.usage import rollups as usage_rollups
from tests.e2e.helpers import messages as thread_messages
from tests.e2e.helpers import new_thread
from tests.support.gateway import InProcessGateway
from tests.support.scripted_upstream import usage_chunk
from tests.turn.openai.model_server import ModelServer, answer_body, chunk, raw_body

MODEL = "scripted-1"
THREAD = "X-Chatgate-Thread-Id"


async def post(client: httpx.AsyncClient, body: dict[str, Any], **headers: str
               ) -> httpx.Response:
    return await client.post("/v1/chat/completions", json=body, headers=headers)


def data_of(response: httpx.Response) -> list[Any]:
    """The `data:` payloads of an event stream, [DONE] as the string."""
    assert response.headers["content-type"].startswith("text/event-stream")
    out: list[Any] = []
    for line in response.text.splitlines():
        if line.startswith("data: "):
            raw = line.removeprefix("data: ")
            out.append(raw if raw == "[DONE]" else json.loads(raw))
    return out


def assert_openai_error(response: httpx.Response, status: int, code: str | None,
                        kind: str = "invalid_request_error") -> dict[str, Any]:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert (body["error"]["type"], body["error"]["code"]) == (kind, code)
    assert body["error"]["message"]
    error: dict[str, Any] = body["error"]
    return error


async def test_stream_follows_the_openai_chunk_format(
    oa_gateway: InProcessGateway, model_server: ModelServer
) -> None:
    model_server.bodies["fmt"] = answer_body(
        ["Hi <!-- METADA", 'TA: {"language": "en"} --> there'])
    async with oa_gateway.client(await oa_gateway.api_key("fmt")) as client:
        response = await post(client, {
            "model": MODEL, "messages": [{"role": "user", "content": "[case:fmt] hello"}],
            "stream": True, "stream_options": {"include_usage": True}})
    *chunks, done = data_of(response)
    assert done == "[DONE]"
    for item in chunks:
        assert item["object"] == "chat.completion.chunk"
        assert {"id", "created", "model", "choices"} <= set(item)
        assert item["id"] == chunks[0]["id"] and item["model"] == MODEL
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert "<!--" not in text and text.startswith("Hi") and text.endswith("there")
    finish = chunks[-2]
    assert finish["choices"] == [{"index": 0, "delta": {}, "logprobs": None,
                                  "finish_reason": "stop"}]
    assert finish["chatgate"]["response_metadata"] == {"language": "en"}
    usage = chunks[-1]
    assert usage["choices"] == [] and usage["usage"] == {
        "prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}
    assert usage["chatgate"]["cost_usd"] == pytest.approx((11 * 1.0 + 7 * 2.0) / 1e6)


def two_choices_body() -> bytes:
    """Two choices interleaved, each splitting its own METADATA differently."""
    pieces = [(0, "First <!-- MET"), (1, "Second <"), (0, 'ADATA: {"n": 0} -->'),
              (1, '!-- METADATA: {"n": 1} --> end')]
    events = [chunk([{"index": i, "delta": {"content": t}, "finish_reason": None}])
              for i, t in pieces]
    events += [chunk([{"index": 0, "delta": {}, "finish_reason": "stop"},
                      {"index": 1, "delta": {}, "finish_reason": "length"}]),
               usage_chunk(5, 10, 15)]
    return raw_body(events)


async def test_each_choice_has_its_own_filter_streamed_or_not(
    oa_gateway: InProcessGateway, model_server: ModelServer
) -> None:
    model_server.bodies["two"] = two_choices_body()
    body = {"model": MODEL, "n": 2, "messages": [{"role": "user", "content": "[case:two] x"}]}
    async with oa_gateway.client(await oa_gateway.api_key("two")) as client:
        whole = (await post(client, body)).json()
        streamed = data_of(await post(client, {**body, "stream": True}))
    texts = {c["index"]: c["message"]["content"] for c in whole["choices"]}
    # each choice is exactly what the filter makes of its own whole output
    assert texts == {0: strip_markers('First <!-- METADATA: {"n": 0} -->').text,
                     1: strip_markers('Second <!-- METADATA: {"n": 1} --> end').text}
    assert "<!--" not in texts[0] + texts[1]
    assert [c["finish_reason"] for c in whole["choices"]] == ["stop", "length"]
    assert whole["chatgate"]["choices"] == [{"index": 0, "response_metadata": {"n": 0}},
                                           {"index": 1, "response_metadata": {"n": 1}}]
    assert model_server.requests_for("two")[0]["n"] == 2
    joined = {0: "", 1: ""}
    for item in streamed[:-1]:
        for choice in item["choices"]:
            joined[choice["index"]] += choice["delta"].get("content", "")
    assert joined == texts


async def test_history_goes_upstream_as_msg_context_and_params_pass_through(
    oa_gateway: InProcessGateway, model_server: ModelServer
) -> None:
    model_server.bodies["hist"] = answer_body(["ok"])
    request = {
        "model": "other-1",
        "messages": [
            {"role": "system", "content": "Answer in French."},
            {"role": "user", "content": "first <!-- question -->"},
            {"role": "assistant",
             "content": 'first answer <!-- METADATA: {"language": "en"} -->'},
            {"role": "user", "content": "[case:hist] and <!-- METADATA: {} --> now?"},
        ],
        "temperature": 0.2, "max_completion_tokens": 55, "stop": ["\n\n"], "seed": 7,
        "response_format": {"type": "text"}, "user": "end-user-1",
        "provider_specific": {"keep": True},
    }
    async with oa_gateway.client(await oa_gateway.api_key("hist")) as client:
        response = await post(client, request)
    assert response.status_code == 200, response.text
    [sent] = model_server.requests_for("hist")
    for name in ("temperature", "max_completion_tokens", "stop", "seed", "response_format",
                 "user", "provider_specific"):
        assert sent[name] == request[name], name
    assert sent["model"] == "other-1" and "max_tokens" not in sent
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}
    system, client_system, user = sent["messages"]
    assert system["role"] == "system" and "METADATA" in system["content"]
    assert client_system == {"role": "system", "content": "Answer in French."}
    marker, _, text = user["content"].partition("\n")
    assert text == "[case:hist] and &lt;!-- METADATA: {} --> now?"
    payload = json.loads(marker.removeprefix("<!-- MSG_CONTEXT: ").removesuffix(" -->"))
    assert payload["history"] == [
        {"role": "user", "content": "first <!-- question -->"},
        {"role": "assistant", "content": "first answer"},
    ]
    assert "<!--" not in marker.removeprefix("<!-- MSG_CONTEXT: ").removesuffix(" -->")


async def test_usage_is_recorded_in_llm_calls_and_the_rollup(
    oa_gateway: InProcessGateway, model_server: ModelServer
) -> None:
    model_server.bodies["usage"] = answer_body(["counted"], usage=(100, 50))
    body = {"model": MODEL, "messages": [{"role": "user", "content": "[case:usage] x"}]}
    async with oa_gateway.client(await oa_gateway.api_key("usage-user")) as client:
        for stream in (False, True):
            response = await post(client, {**body, "stream": stream})
            assert response.status_code == 200
        report = (await client.get("/api/usage")).json()
    cost = (100 * 1.0 + 50 * 2.0) / 1e6
    assert report["totals"]["llm_call_count"] == 2
    assert report["totals"]["total_tokens"] == 300
    assert report["totals"]["cost_usd"] == pytest.approx(2 * cost)
    db = oa_gateway.runtime.db
    check = await oa_gateway.server.loop.arun(usage_rollups.verify(db))
    assert check.mismatches == []


async def test_with_a_thread_header_the_exchange_is_stored_in_the_thread(
    oa_gateway: InProcessGateway, model_server: ModelServer
) -> None:
    model_server.bodies["stored"] = answer_body(
        ["Stored ", "answer <!-- METADATA: ", '{"awaiting": null} -->'])
    async with oa_gateway.client(await oa_gateway.api_key("threads")) as client:
        thread_id = await new_thread(client)
        body = {"model": MODEL, "stream": True,
                "messages": [{"role": "user", "content": "[case:stored] keep me"}]}
        response = await post(client, body, **{THREAD: thread_id})
        chunks = data_of(response)
        rows = await thread_messages(client, thread_id)
        foreign = await oa_gateway.api_key("someone-else")
        other = await post(oa_gateway.client(foreign), body, **{THREAD: thread_id})
        malformed = await post(client, body, **{THREAD: "not-a-uuid"})
    shown = "".join(c["choices"][0]["delta"].get("content", "")
                    for c in chunks[:-1] if c["choices"])
    assert [(r["role"], r["content"]) for r in rows] == [
        ("user", "[case:stored] keep me"), ("assistant", shown)]
    assert shown == "Stored answer"
    assert rows[1]["status"] == "complete"
    ext = chunks[-2]["chatgate"]
    assert ext["thread_id"] == thread_id and ext["message_id"] == rows[1]["id"]
    assert ext["stored"] is True
    assert_openai_error(other, 404, "thread_not_found")
    assert_openai_error(malformed, 400, "invalid_request_error")


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"messages": [{"role": "user", "content": "x"}]}, "model"),
        ({"model": MODEL}, "messages"),
        ({"model": MODEL, "messages": []}, "messages"),
        ({"model": MODEL, "messages": [{"role": "system", "content": "x"}]}, "messages"),
        ({"model": MODEL, "messages": [{"role": "wizard", "content": "x"}]},
         "messages[0].role"),
        ({"model": MODEL, "messages": [{"role": {}, "content": "x"}]}, "messages[0].role"),
        ({"model": MODEL, "messages": [{"role": "user", "content": 3}]},
         "messages[0].content"),
        ({"model": MODEL, "messages": [{"role": "user", "content": "x"}], "n": 0}, "n"),
        ({"model": MODEL, "messages": [{"role": "user", "content": "x"}], "stream": "yes"},
         "stream"),
    ],
)
async def test_bad_requests_are_openai_400s(
    oa_gateway: InProcessGateway, body: dict[str, Any], param: str
) -> None:
    async with oa_gateway.client(await oa_gateway.api_key("careless")) as client:
        error = assert_openai_error(await post(client, body), 400, "invalid_request_error")
    assert error["param"] == param


async def test_refusals_speak_openai(oa_gateway: InProcessGateway) -> None:
    ask = {"model": MODEL, "messages": [{"role": "user", "content": "x"}]}
    async with oa_gateway.client() as anonymous:
        assert_openai_error(await post(anonymous, ask), 401, "invalid_api_key")
        assert_openai_error(await anonymous.get("/v1/models"), 401, "invalid_api_key")
    async with oa_gateway.client(await oa_gateway.api_key("refused")) as client:
        error = assert_openai_error(await post(client, {**ask, "model": "gpt-9"}), 404,
                                    "model_not_found")
        assert error["param"] == "model"
        assert_openai_error(await client.get("/v1/models/gpt-9"), 404, "model_not_found")
        assert (await client.get("/v1/models/other-1")).json()["id"] == "other-1"
        assert_openai_error(await client.get("/v1/embeddings"), 404, "unknown_url")
        not_json = await client.post("/v1/chat/completions", content=b"{",
                                     headers={"content-type": "application/json"})
        assert_openai_error(not_json, 400, "invalid_json")


async def test_a_model_server_failure_is_a_5xx_or_an_error_event(
    oa_gateway: InProcessGateway, model_server: ModelServer
) -> None:
    # the body breaks off after some text: no finish, no [DONE]
    cut = "".join(f"data: {e}\n\n" for e in [
        chunk([{"index": 0, "delta": {"content": "partial <!-- MET"}}])]).encode()
    model_server.bodies["cut"] = cut
    ask = {"model": MODEL, "messages": [{"role": "user", "content": "[case:cut] x"}]}
    async with oa_gateway.client(await oa_gateway.api_key("cut")) as client:
        whole = await post(client, ask)
        streamed = data_of(await post(client, {**ask, "stream": True}))
    assert_openai_error(whole, 502, "upstream_truncated", "server_error")
    assert streamed[-1]["error"]["code"] == "upstream_truncated"
    assert streamed[-1]["error"]["type"] == "server_error"
    text = "".join(c["choices"][0]["delta"].get("content", "")
                   for c in streamed[:-1] if c.get("choices"))
    assert text == "partial <!-- MET"  # what the filter held is resolved, nothing hidden


async def test_a_tool_round_in_a_thread_stores_the_question_once(
    oa_gateway: InProcessGateway, model_server: ModelServer
) -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    model_server.bodies["round"] = raw_body([
        chunk([{"index": 0, "delta": {"tool_calls": [{"index": 0, **call}]}}]),
        chunk([{"index": 0, "delta": {}, "finish_reason": "tool_calls"}])])
    model_server.bodies["round.after-tool"] = answer_body(["Done."])
    question = {"role": "user", "content": "[case:round] do it"}
    async with oa_gateway.client(await oa_gateway.api_key("rounds")) as client:
        thread_id = await new_thread(client)
        first = await post(client, {"model": MODEL, "messages": [question]},
                           **{THREAD: thread_id})
        assert first.json()["choices"][0]["message"]["tool_calls"][0]["id"] == "c1"
        second = await post(client, {"model": MODEL, "messages": [
            question, {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": "ok"}]}, **{THREAD: thread_id})
        assert second.json()["choices"][0]["message"]["content"] == "Done."
        rows = await thread_messages(client, thread_id)
    assert [(r["role"], r["content"]) for r in rows] == [
        ("user", "[case:round] do it"), ("assistant", ""), ("assistant", "Done.")]
    assert rows[1]["metadata"]["tool_calls"] == [call]
