"""What a client that reads `/v1/messages` itself gets on the wire: the streamed events in
Anthropic's order, each an `event:` line naming its `type` (a `ping` after
`message_start`); a model server that breaks off is a 502 `api_error` whole, and a last
`error` event streamed, after the text the filter held."""

from __future__ import annotations

import json
from typing import Any

from tests.support.gateway import InProcessGateway
from tests.support.gateway.sse import parse_sse
from tests.turn.openai.model_server import ModelServer, answer_body, chunk

MODEL = "scripted-1"


def headers(key: str) -> dict[str, str]:
    return {"x-api-key": key, "anthropic-version": "2023-06-01"}


def body(tag: str, **extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "max_tokens": 64,
            "messages": [{"role": "user", "content": f"[case:{tag}] x"}], **extra}


async def test_the_stream_is_anthropics_events_in_order(
    oa_gateway: InProcessGateway, model_server: ModelServer
) -> None:
    model_server.bodies["wire"] = answer_body(
        ["Hel", "lo <!-- METADATA: ", '{"language": "en"} -->'])
    async with oa_gateway.client() as client:
        response = await client.post("/v1/messages", json=body("wire", stream=True),
                                     headers=headers(await oa_gateway.api_key("wire")))
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    events = parse_sse(response.text)
    assert all(e.event == e.data["type"] for e in events)
    names = [e.event for e in events]
    assert names[:3] == ["message_start", "ping", "content_block_start"]
    assert names[-4:] == ["content_block_delta", "content_block_stop", "message_delta",
                          "message_stop"] or names[-3:] == [
        "content_block_stop", "message_delta", "message_stop"]
    assert "".join(e.data["delta"]["text"] for e in events
                   if e.event == "content_block_delta") == "Hello"
    end = events[names.index("message_delta")].data
    assert end["delta"] == {"stop_reason": "end_turn", "stop_sequence": None}
    assert end["chatgate"]["response_metadata"] == {"language": "en"}


async def test_a_model_server_failure_is_a_502_or_an_error_event(
    oa_gateway: InProcessGateway, model_server: ModelServer
) -> None:
    # the body breaks off after some text: no finish, no [DONE]
    model_server.bodies["wire-cut"] = "".join(f"data: {e}\n\n" for e in [
        chunk([{"index": 0, "delta": {"content": "partial <!-- MET"}}])]).encode()
    async with oa_gateway.client() as client:
        key = headers(await oa_gateway.api_key("wire-cut"))
        whole = await client.post("/v1/messages", json=body("wire-cut"), headers=key)
        streamed = await client.post("/v1/messages", json=body("wire-cut", stream=True),
                                     headers=key)
    assert whole.status_code == 502
    assert whole.json()["type"] == "error" and whole.json()["error"]["type"] == "api_error"
    events = parse_sse(streamed.text)
    assert events[-1].event == "error"
    assert events[-1].data["error"]["type"] == "api_error"
    assert "".join(e.data["delta"]["text"] for e in events
                   if e.event == "content_block_delta") == "partial <!-- MET"
    assert json.dumps(events[-1].data).count("MET") == 0


async def test_a_malformed_tool_is_a_400_naming_it(oa_gateway: InProcessGateway) -> None:
    """A tool whose `type` is no string (found by the schema fuzz): a 400, never a 500."""
    tool = {"name": "t", "input_schema": {}, "type": {}}
    async with oa_gateway.client() as client:
        key = headers(await oa_gateway.api_key("wire-tool"))
        answers = [await client.post(path, headers=key, json={**body("x"), "tools": [tool]})
                   for path in ("/v1/messages", "/v1/messages/count_tokens")]
    for answer in answers:
        assert answer.status_code == 400
        assert answer.json()["error"]["message"].startswith("tools.0.type:")
