"""The bad-input table over real HTTP: precise 4xx, always {"error": {"code", "message"}},
never a 500, and nothing stored for a refused request."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import httpx
import pytest

from app.keys import repository as api_keys
from app.store.db import Database
from tests.e2e.helpers import keyed_client, messages, new_thread
from tests.support.gateway import InProcessGateway, LiveGateway, post_turn
from tests.support.waits import until


def assert_error(response: httpx.Response | Any, status: int, code: str) -> None:
    body = response.json()
    assert response.status_code == status, response.text
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}
    assert body["error"]["code"] == code and body["error"]["message"]


@pytest.mark.parametrize(
    ("raw", "status", "code"),
    [
        (b"{not json", 400, "invalid_json"),
        (b"", 400, "invalid_json"),
        (b"\xff\xfe", 400, "invalid_json"),
        (b'["content"]', 400, "invalid_json"),
        (b"{}", 422, "invalid_content"),
        (b'{"content": ""}', 422, "invalid_content"),
        (b'{"content": "   \\n "}', 422, "invalid_content"),
        (b'{"content": 42}', 422, "invalid_content"),
        (b'{"content": null}', 422, "invalid_content"),
        (b'{"content": ["a"]}', 422, "invalid_content"),
        (b'{"content": "' + b"x" * 32_001 + b'"}', 413, "content_too_long"),
    ],
)
async def test_post_message_refuses_bad_bodies(
    gateway: LiveGateway, raw: bytes, status: int, code: str
) -> None:
    async with await keyed_client(gateway, "careless") as client:
        thread_id = await new_thread(client)
        result = await post_turn(client, thread_id, None, raw_body=raw)
        assert result.status_code == status, result.raw
        assert result.body["error"]["code"] == code
        assert await messages(client, thread_id) == []


async def test_content_at_the_limit_is_accepted_even_fully_escaped(gateway: LiveGateway) -> None:
    async with await keyed_client(gateway, "escaped") as client:
        thread_id = await new_thread(client)
        raw = b'{"content": "' + b"\\u00e9" * 32_000 + b'"}'
        result = await post_turn(client, thread_id, None, raw_body=raw)
        assert result.one("message_end")["status"] == "complete"
        assert (await messages(client, thread_id))[0]["content"] == "é" * 32_000


async def test_content_at_the_limit_is_accepted_even_as_escaped_surrogate_pairs(
    gateway: LiveGateway,
) -> None:
    """What `json.dumps` (ensure_ascii) sends for emoji: 12 bytes a character."""
    async with await keyed_client(gateway, "emoji") as client:
        thread_id = await new_thread(client)
        raw = json.dumps({"content": "\U0001f600" * 32_000}).encode()
        assert raw.count(b"\\ud83d\\ude00") == 32_000
        result = await post_turn(client, thread_id, None, raw_body=raw)
        assert result.one("message_end")["status"] == "complete"
        assert (await messages(client, thread_id))[0]["content"] == "\U0001f600" * 32_000


async def test_huge_body_is_refused_before_it_is_parsed(gateway: LiveGateway) -> None:
    async with await keyed_client(gateway, "flood") as client:
        thread_id = await new_thread(client)
        raw = b'{"content": "hi", "padding": "' + b" " * 2_000_000 + b'"}'
        result = await post_turn(client, thread_id, None, raw_body=raw)
        assert result.status_code == 413, result.raw
        assert result.body["error"]["code"] == "body_too_large"
        assert result.body["error"]["message"] == (
            "the message is too long: the limit is 32000 characters (the request body is over "
            "449536 bytes)")
        assert await messages(client, thread_id) == []


async def test_content_at_the_limit_is_accepted(gateway: LiveGateway) -> None:
    async with await keyed_client(gateway, "verbose") as client:
        thread_id = await new_thread(client)
        result = await post_turn(client, thread_id, "y" * 32_000)
        assert result.one("message_end")["status"] == "complete"


@pytest.mark.parametrize("thread_id", [str(uuid.uuid4()), "not-a-uuid", "1"],
                         ids=["unknown-uuid", "not-a-uuid", "1"])
async def test_unknown_thread_is_404_on_every_route(gateway: LiveGateway, thread_id: str) -> None:
    async with await keyed_client(gateway, "lost") as client:
        assert_error(await client.get(f"/api/threads/{thread_id}/messages"), 404, "not_found")
        assert_error(await client.delete(f"/api/threads/{thread_id}"), 404, "not_found")
        response = await client.post(f"/api/threads/{thread_id}/messages",
                                     json={"content": "hi"})
        assert_error(response, 404, "not_found")


async def test_missing_wrong_and_revoked_keys_are_401(gateway: LiveGateway) -> None:
    db = Database(gateway.database_url)
    async with db.transaction() as session:
        row, revoked = await api_keys.create_key(session, "former", "old")
    async with db.transaction() as session:
        assert await api_keys.revoke_key(session, row.id)
    await db.dispose()
    attempts: list[dict[str, str]] = [
        {},
        {"Authorization": "Bearer cg_wrong"},
        {"Authorization": "Bearer"},
        {"Authorization": "Basic dXNlcjpwYXNz"},
        {"Authorization": f"Bearer {revoked}"},
    ]
    async with httpx.AsyncClient(base_url=gateway.url) as client:
        some_thread = str(uuid.uuid4())
        for headers in attempts:
            for method, path in [("GET", "/api/threads"), ("POST", "/api/threads"),
                                 ("GET", f"/api/threads/{some_thread}/messages"),
                                 ("POST", f"/api/threads/{some_thread}/messages"),
                                 ("DELETE", f"/api/threads/{some_thread}")]:
                response = await client.request(method, path, headers=headers,
                                                json={"content": "hi"})
                assert_error(response, 401, "unauthorized")


async def test_create_thread_body_checks(gateway: LiveGateway) -> None:
    async with await keyed_client(gateway, "titler") as client:
        assert_error(await client.post("/api/threads", content=b"{oops", headers=JSON_TYPE),
                     400, "invalid_json")
        assert_error(await client.post("/api/threads", json={"title": 5}), 422, "invalid_title")
        assert_error(await client.post("/api/threads", json={"title": "t" * 201}),
                     422, "invalid_title")
        created = await client.post("/api/threads")
        assert created.status_code == 201 and created.json()["title"] is None
        titled = await client.post("/api/threads", json={"title": "Trip <plans>"})
        assert titled.json()["title"] == "Trip <plans>"


JSON_TYPE = {"Content-Type": "application/json"}


@pytest.mark.parametrize("content_type", [
    None, "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
    "text/html; charset=utf-8", "application/jsonx", "application/json-patch+json",
])
async def test_json_routes_refuse_other_media_types_with_415(
    gateway: LiveGateway, content_type: str | None
) -> None:
    """Every route that reads a JSON body: a post turn, a new thread with a title, a PATCH."""
    headers = {} if content_type is None else {"Content-Type": content_type}
    body = json.dumps({"content": "hi", "title": "t"}).encode()
    async with await keyed_client(gateway, "formal") as client:
        thread_id = await new_thread(client)
        threads_before = (await client.get("/api/threads")).json()["threads"]
        for method, path in [("POST", f"/api/threads/{thread_id}/messages"),
                             ("POST", "/api/threads"), ("PATCH", f"/api/threads/{thread_id}")]:
            response = await client.request(method, path, content=body, headers=headers)
            assert_error(response, 415, "unsupported_media_type")
        assert await messages(client, thread_id) == []
        assert (await client.get("/api/threads")).json()["threads"] == threads_before


@pytest.mark.parametrize("content_type", [
    "application/json", "application/json; charset=utf-8", "Application/JSON;Charset=UTF-8",
    "application/json ; charset=\"utf-8\"",
])
async def test_json_with_any_charset_and_case_is_accepted(
    gateway: LiveGateway, content_type: str
) -> None:
    async with await keyed_client(gateway, "typed") as client:
        created = await client.post("/api/threads", content=b'{"title": "x"}',
                                    headers={"Content-Type": content_type})
        assert created.status_code == 201, created.text
        result = await post_turn(client, created.json()["id"], None,
                                 raw_body=b'{"content": "hi"}')
        assert result.one("message_end")["status"] == "complete"


async def test_a_post_without_a_body_needs_no_type(gateway: LiveGateway) -> None:
    async with await keyed_client(gateway, "bare") as client:
        created = await client.post("/api/threads", headers={"Content-Type": "text/plain"})
        assert created.status_code == 201, created.text


async def test_unknown_route_and_method_answer_json(gateway: LiveGateway) -> None:
    async with await keyed_client(gateway, "wanderer") as client:
        assert_error(await client.get("/api/nothing-here"), 404, "not_found")
        assert_error(await client.put("/api/threads"), 405, "method_not_allowed")


async def test_a_client_leaving_mid_body_is_no_server_error(gateway: InProcessGateway) -> None:
    """Half a body, then the connection closes: nobody is left to answer, but the gateway must
    not count it as its own failure (no 500, no `unhandled_error` with a traceback)."""
    async with await keyed_client(gateway, "leaver") as client:
        thread_id = await new_thread(client)
        key = client.headers["authorization"]
    host, port = gateway.url.removeprefix("http://").split(":")
    _, writer = await asyncio.open_connection(host, int(port))
    writer.write(
        f"POST /api/threads/{thread_id}/messages HTTP/1.1\r\nhost: {host}\r\n"
        f"authorization: {key}\r\ncontent-type: application/json\r\n"
        "content-length: 1000\r\n\r\n".encode() + b'{"content": "only half'
    )
    await writer.drain()
    await until(lambda: any(getattr(c, "cycle", None) for c in gateway.open_connections()),
                what="the server to read the request's head")
    [reading] = gateway.open_connections()
    writer.close()
    await writer.wait_closed()
    async with await keyed_client(gateway, "leaver") as client:
        assert (await client.get("/healthz")).status_code == 200
        assert await messages(client, thread_id) == []
    await until(lambda: reading not in gateway.open_connections(),
                what="the server to notice the closed socket")
    assert not [line for line in gateway.logs() if line.get("event") == "unhandled_error"]
