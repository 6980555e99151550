"""The OpenAPI document kept true: every route of the route table is in it with its methods
and no more, it is valid OpenAPI 3.1, each error takes its API's shape, and what a running
gateway answers on the main routes (JSON bodies, event streams, refusals) is what it says.
The schema-based fuzz (test_fuzz.py) then tries the rest."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import httpx
import jsonschema_rs
import pytest
import schemathesis
from starlette.routing import Route

from app.gateway.routes import api_routes
from app.openapi import document
from app.openapi.native import ORIGINS, ROLES, STATUSES
from app.store.models import MESSAGE_ROLES, MESSAGE_STATUSES, THREAD_ORIGINS
from app.usage.endpoints import usage_routes
from tests.e2e.helpers import new_thread
from tests.support.gateway import DemoLlm, InProcessGateway, StartGateway, parse_sse

METHODS = {"get", "put", "post", "delete", "options", "head", "patch", "trace"}
DOCUMENT = document(max_content_chars=32_000)
#: The operations whose answer streams, and the media type it streams in.
STREAMING = {("/api/threads/{thread_id}/messages", "post"),
             ("/api/threads/{thread_id}/messages/{message_id}/stream", "get"),
             ("/api/threads/{thread_id}/messages/{message_id}/continue", "post"),
             ("/api/threads/{thread_id}/messages/{message_id}/regenerate", "post"),
             ("/api/threads/{thread_id}/events", "get"),
             ("/v1/chat/completions", "post"), ("/v1/responses", "post"),
             ("/v1/messages", "post")}


def _documented() -> dict[str, set[str]]:
    return {path: {m.upper() for m in item if m in METHODS}
            for path, item in DOCUMENT["paths"].items()}


def _operations() -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, item in DOCUMENT["paths"].items():
        for method, op in item.items():
            if method in METHODS:
                yield path, method, op


def test_every_route_is_documented_with_its_methods_and_no_more() -> None:
    """Starlette answers HEAD on every GET route (the document says so once, in its
    description); a `{name:path}` parameter is a plain one in OpenAPI."""
    routes: dict[str, set[str]] = {}
    for route in api_routes():
        assert isinstance(route, Route)
        path = re.sub(r"\{(\w+):path\}", r"{\1}", route.path)
        methods = set(route.methods or ())
        if "GET" in methods:
            methods.discard("HEAD")
        routes.setdefault(path, set()).update(methods)
    assert {r.path for r in usage_routes() if isinstance(r, Route)} <= set(routes)
    assert _documented() == routes


def test_the_document_is_valid_openapi_3_1_and_every_reference_resolves() -> None:
    schemathesis.openapi.from_dict(DOCUMENT).validate()
    text = json.dumps(DOCUMENT)
    for name in set(re.findall(r'"#/components/schemas/(\w+)"', text)):
        assert name in DOCUMENT["components"]["schemas"], name


def test_errors_take_the_shape_of_their_api() -> None:
    for path, method, op in _operations():
        shape = ("AnthropicError" if path.startswith("/v1/messages") else
                 "OpenAIError" if path.startswith("/v1") else "NativeError")
        for status, response in op["responses"].items():
            if int(status) < 400 or (path, status) == ("/readyz", "503"):
                continue
            schema = response["content"]["application/json"]["schema"]
            assert schema == {"$ref": f"#/components/schemas/{shape}"}, (path, method, status)


def test_main_bodies_and_answers_have_schemas_and_streams_are_event_streams() -> None:
    for path, method, op in _operations():
        if "requestBody" in op:
            assert "schema" in op["requestBody"]["content"]["application/json"]
        for status, response in op["responses"].items():
            content = response.get("content", {})
            if status.startswith("2") and status != "204":
                assert content and all("schema" in c for c in content.values()), (path, status)
            streams = "text/event-stream" in content
            assert streams == (status == "200" and (path, method) in STREAMING), (path, status)
    bodies = {(p, m) for p, m, op in _operations() if "requestBody" in op}
    assert bodies == {("/api/threads", "post"), ("/api/threads/{thread_id}", "patch"),
                      ("/api/threads/{thread_id}/messages", "post"),
                      ("/api/threads/{thread_id}/messages/{message_id}/regenerate", "post"),
                      ("/v1/chat/completions", "post"), ("/v1/responses", "post"),
                      ("/v1/messages", "post"), ("/v1/messages/count_tokens", "post")}


def test_the_stored_message_enums_are_the_stores() -> None:
    assert (list(MESSAGE_ROLES), list(MESSAGE_STATUSES)) == (ROLES, STATUSES)
    assert list(THREAD_ORIGINS) == ORIGINS


def test_a_model_the_key_may_not_use_may_be_a_404() -> None:
    model = DOCUMENT["paths"]["/v1/models/{model}"]["get"]
    assert "404" in model["responses"]
    assert "may not use" in model["description"]


@pytest.fixture
def gateway(start_gateway: StartGateway, demo_llm: DemoLlm) -> InProcessGateway:
    return start_gateway("sqlite", upstream=demo_llm, env={
        "CHATGATE_TITLE_CALLS": "false", "CHATGATE_SUMMARY_CALLS": "false",
        "CHATGATE_MAX_CONTENT_CHARS": "1000"})


async def test_a_running_gateway_answers_as_its_document_says(
    gateway: InProcessGateway,
) -> None:
    """The main routes, their streams and both error shapes, each answer checked against
    the document the gateway serves (which carries its own content limit)."""
    async with gateway.client(await gateway.api_key("reader", admin=True)) as client:
        served = (await client.get("/openapi.json")).json()
        assert served == json.loads(json.dumps(document(max_content_chars=1000)))
        schema = schemathesis.openapi.from_dict(served)
        seen: list[tuple[str, str, int]] = []

        def check(path: str, response: httpx.Response) -> httpx.Response:
            method = response.request.method
            schema[path][method].validate_response(response)
            seen.append((path, method, response.status_code))
            return response

        thread_id = (await client.post("/api/threads", json={"title": "t"})).json()["id"]
        check("/api/threads", await client.post("/api/threads", json={"title": "t"}))
        turn = check("/api/threads/{thread_id}/messages", await client.post(
            f"/api/threads/{thread_id}/messages", json={"content": "Hello"}))
        start = next(e for e in parse_sse(turn.text) if e.event == "message_start").data
        answer = start["assistant_message_id"]
        check("/api/threads/{thread_id}/messages/{message_id}/stream", await client.get(
            f"/api/threads/{thread_id}/messages/{answer}/stream"))
        check("/api/threads/{thread_id}/messages/{message_id}/stop", await client.post(
            f"/api/threads/{thread_id}/messages/{answer}/stop"))
        for path in ("/api/threads", "/api/models", "/api/usage", "/api/admin/refusals",
                     "/api/admin/usage/report", "/v1/models", "/v1/models/demo-1",
                     "/healthz", "/readyz", "/metrics"):
            template = "/v1/models/{model}" if path.startswith("/v1/models/") else path
            check(template, await client.get(path))
        check("/api/admin/usage", await client.get("/api/admin/usage?user_id=reader"))
        check("/api/threads/{thread_id}/messages",
              await client.get(f"/api/threads/{thread_id}/messages"))
        check("/api/threads/{thread_id}", await client.patch(
            f"/api/threads/{thread_id}", json={"autonomy": {"enabled": False}}))
        ask = {"model": "demo-1", "messages": [{"role": "user", "content": "Hi"}]}
        for stream in (False, True):
            check("/v1/chat/completions", await client.post(
                "/v1/chat/completions", json={**ask, "stream": stream},
                headers={"X-Chatgate-Thread-Id": thread_id}))
            reply = check("/v1/responses", await client.post(
                "/v1/responses", json={"model": "demo-1", "input": "Hi", "stream": stream}))
            check("/v1/messages", await client.post("/v1/messages", json={
                "model": "demo-1", "max_tokens": 64, "stream": stream,
                "messages": [{"role": "user", "content": "Hi"}]}))
        check("/v1/messages/count_tokens", await client.post(
            "/v1/messages/count_tokens", json={"model": "demo-1", "messages": [
                {"role": "user", "content": "Hi"}]}))
        check("/v1/messages", await client.post("/v1/messages", json={"model": "demo-1"}))
        stored = next(e for e in parse_sse(reply.text) if e.event == "response.completed")
        check("/v1/responses/{response_id}",
              await client.get(f"/v1/responses/{stored.data['response']['id']}"))
        # refusals, in each API's shape
        check("/api/threads/{thread_id}/messages", await client.post(
            f"/api/threads/{thread_id}/messages", content=b'{"content": "x", "n": NaN}',
            headers={"content-type": "application/json"}))
        check("/api/threads/{thread_id}/messages", await client.post(
            f"/api/threads/{thread_id}/messages", json={"content": "x" * 1001}))
        check("/v1/chat/completions", await client.post(
            "/v1/chat/completions", json={**ask, "seed": 2**64}))
        check("/v1/responses/{response_id}", await client.get("/v1/responses/resp_0"))
        check("/api/threads/{thread_id}", await client.delete(f"/api/threads/{thread_id}"))
        check("/api/threads/{thread_id}", await client.delete(f"/api/threads/{thread_id}"))
        async with gateway.client() as anonymous:
            check("/v1/models", await anonymous.get("/v1/models"))
            check("/api/threads", await anonymous.get("/api/threads"))
    statuses = {status for _, _, status in seen}
    assert {200, 201, 204, 400, 401, 404, 413} <= statuses, seen


async def test_a_threads_live_event_stream_starts_as_documented(
    gateway: InProcessGateway,
) -> None:
    """The one stream that never ends by itself: its first event, read off the socket."""
    schema = (DOCUMENT["paths"]["/api/threads/{thread_id}/events"]["get"]["responses"]
              ["200"]["content"]["text/event-stream"]["schema"])
    async with gateway.client(await gateway.api_key("listener"), over_http=True) as client:
        thread_id = await new_thread(client)
        async with client.stream("GET", f"/api/threads/{thread_id}/events") as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            frame: dict[str, str] = {}
            async for line in response.aiter_lines():
                if line == "" and frame:
                    break
                if line and not line.startswith(":"):
                    name, _, value = line.partition(":")
                    frame[name] = value.removeprefix(" ")
    jsonschema_rs.validator_for(schema).validate(frame)
    assert frame["event"] == "ready"
