"""JSON past the gateway's limits, on every API over a live gateway: an integer a model server
cannot take, nesting deeper than 64 levels, NaN. Each is a 400 naming the field (native:
`{"error": {"code", "message"}}`; `/v1`: OpenAI's shape with the field's path as `param`),
and nothing follows from it: no call recorded or billed, no message stored, no request to
the model server."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select

from app.store.db import Database
from app.store.models import LlmCall, Message, Thread
from tests.e2e.helpers import new_thread
from tests.support.gateway import GatewayPool, InProcessGateway
from tests.turn.openai.model_server import ModelServer

MODEL = "scripted-1"
THREAD = "X-Chatgate-Thread-Id"
#: The smallest integer past signed 64 bits, the largest a model server can parse.
TOO_BIG = 2**63
#: 70 levels of arrays: past the limit of 64 whatever the field's own depth.
DEEP = "[" * 70 + "]" * 70


@pytest.fixture(scope="module")
def model_server() -> Iterator[ModelServer]:
    server = ModelServer().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def gateway(live_backend: str, model_server: ModelServer, live_log_dir: Path
            ) -> Iterator[InProcessGateway]:
    with GatewayPool(live_log_dir) as pool:
        yield pool.start(live_backend, upstream=model_server.base_url, env={
            "CHATGATE_TITLE_CALLS": "false", "CHATGATE_SUMMARY_CALLS": "false",
            "CHATGATE_RATE_LIMIT_PER_MINUTE": "0", "CHATGATE_UPSTREAM_MODEL": MODEL,
            "CHATGATE_MODELS": MODEL, "CHATGATE_FIRST_TOKEN_TIMEOUT_S": "10"})


@dataclass(frozen=True)
class Case:
    """A body (raw JSON text, since NaN and 2**63 are what a careless client writes, not
    what json.dumps would) and the field it breaks."""

    api: str
    body: str
    param: str
    code: str


def _chat(extra: str) -> str:
    return ('{"model": "scripted-1", "messages": [{"role": "user", "content": "hi"}]'
            + extra + "}")


def _responses(extra: str) -> str:
    return '{"model": "scripted-1", "input": "hi"' + extra + "}"


def _tool(parameters: str) -> str:
    return (', "tools": [{"type": "function", "function": {"name": "f", "parameters": '
            + parameters + "}}]")


def _response_tool(parameters: str) -> str:
    return ', "tools": [{"type": "function", "name": "f", "parameters": ' + parameters + "}]"


DEEP_PATH = "[0]" * 63
CASES = [
    Case("native", f'{{"content": "hi", "seed": {TOO_BIG}}}', "seed", "integer_out_of_range"),
    Case("native", f'{{"content": "hi", "options": {DEEP}}}', "options" + "[0]" * 63,
         "nesting_too_deep"),
    Case("native", '{"content": "hi", "temperature": NaN}', "temperature",
         "non_finite_number"),
    Case("chat", _chat(f', "seed": {TOO_BIG}'), "seed", "integer_out_of_range"),
    Case("chat", _chat(f', "max_tokens": {-TOO_BIG - 1}'), "max_tokens",
         "integer_out_of_range"),
    Case("chat", _chat(_tool('{"type": "object", "properties": {"x": {"type": "integer", '
                             f'"maximum": {2**64}}}}}}}')),
         "tools[0].function.parameters.properties.x.maximum", "integer_out_of_range"),
    Case("chat", _chat(_tool(DEEP)), "tools[0].function.parameters" + "[0]" * 60,
         "nesting_too_deep"),
    Case("chat", _chat(', "temperature": NaN'), "temperature", "non_finite_number"),
    Case("chat", _chat(', "top_p": -Infinity'), "top_p", "non_finite_number"),
    Case("responses", _responses(f', "max_output_tokens": {TOO_BIG}'), "max_output_tokens",
         "integer_out_of_range"),
    Case("responses", _responses(_response_tool(DEEP)), "tools[0].parameters" + "[0]" * 61,
         "nesting_too_deep"),
    Case("responses", _responses(', "temperature": 1e999'), "temperature",
         "non_finite_number"),
]


async def _rows(gateway: InProcessGateway, user: str) -> tuple[int, int, int]:
    """The user's recorded calls, messages and threads."""
    db = Database(gateway.database_url)
    try:
        async with db.transaction(read_only=True) as session:
            counts = []
            for model in (LlmCall, Message, Thread):
                counts.append(await session.scalar(
                    select(func.count()).select_from(model).where(model.user_id == user)))
    finally:
        await db.dispose()
    calls, messages, threads = counts
    return int(calls or 0), int(messages or 0), int(threads or 0)


async def _send(client: httpx.AsyncClient, case: Case, thread_id: str) -> httpx.Response:
    headers = {"content-type": "application/json"}
    if case.api == "native":
        return await client.post(f"/api/threads/{thread_id}/messages", content=case.body,
                                 headers=headers)
    path = "/v1/chat/completions" if case.api == "chat" else "/v1/responses"
    return await client.post(path, content=case.body, headers={**headers, THREAD: thread_id})


@pytest.mark.parametrize("case", CASES, ids=[f"{c.api}-{c.code}-{i}" for i, c in enumerate(CASES)])
async def test_a_body_past_the_json_limits_is_a_400_naming_the_field_and_nothing_follows(
    gateway: InProcessGateway, model_server: ModelServer, case: Case
) -> None:
    user = f"limits-{case.api}-{CASES.index(case)}"
    async with gateway.client(await gateway.api_key(user)) as client:
        thread_id = await new_thread(client)
        upstream_before = len(model_server.requests)
        response = await _send(client, case, thread_id)
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        if case.api == "native":
            assert set(error) == {"code", "message"}
        else:
            assert set(error) == {"message", "type", "param", "code"}
            assert error["type"] == "invalid_request_error"
            assert error["param"] == case.param
        assert error["code"] == case.code
        assert f"'{case.param}'" in error["message"]
        history = (await client.get(f"/api/threads/{thread_id}/messages")).json()
    assert history == {"messages": []}
    assert len(model_server.requests) == upstream_before
    assert await _rows(gateway, user) == (0, 0, 1)  # the one thread the test made, empty


async def test_the_largest_integers_and_64_levels_still_pass(
    gateway: InProcessGateway, model_server: ModelServer
) -> None:
    """The limits' edges are accepted and reach the model server as sent."""
    nested: Any = {}
    for _ in range(59):  # the body, tools, the tool, function, parameters (5): 64 in all
        nested = {"n": nested}
    body = {"model": MODEL, "messages": [{"role": "user", "content": "edge"}],
            "seed": 2**63 - 1, "logit_bias": {"1": -(2**63)},
            "tools": [{"type": "function", "function": {"name": "f", "parameters": nested}}]}
    async with gateway.client(await gateway.api_key("edges")) as client:
        response = await client.post("/v1/chat/completions", content=json.dumps(body),
                                     headers={"content-type": "application/json"})
    assert response.status_code == 200, response.text
    sent = model_server.requests[-1]
    assert sent["seed"] == 2**63 - 1 and sent["logit_bias"] == {"1": -(2**63)}
    assert sent["tools"] == body["tools"]


async def test_the_thread_routes_hold_their_bodies_to_the_same_limits(
    gateway: InProcessGateway,
) -> None:
    headers = {"content-type": "application/json"}
    async with gateway.client(await gateway.api_key("limits-threads")) as client:
        thread_id = await new_thread(client)
        patched = await client.patch(f"/api/threads/{thread_id}", headers=headers,
                                     content='{"autonomy": {"idle_seconds": 1e999}}')
        created = await client.post("/api/threads", headers=headers,
                                    content=f'{{"title": "t", "x": {TOO_BIG}}}')
        threads = (await client.get("/api/threads")).json()["threads"]
    assert patched.status_code == 400, patched.text
    assert patched.json()["error"]["code"] == "non_finite_number"
    assert "'autonomy.idle_seconds'" in patched.json()["error"]["message"]
    assert created.status_code == 400, created.text
    assert created.json()["error"]["code"] == "integer_out_of_range"
    assert [t["id"] for t in threads] == [thread_id]  # no second thread
