"""The streamed request without the SDK: what it sends, which failures it retries and how
long it waits, and the error a user reads when the retries are spent."""

from __future__ import annotations

import json
import tracemalloc
from collections.abc import Callable

import httpx
import pytest

from app.upstream import UpstreamError
from app.upstream.sending import StreamSender, retry_pause_s, should_retry

Handler = Callable[[httpx.Request], httpx.Response]
QUICK_RETRY = {"retry-after-ms": "1"}
STREAM_OK = httpx.Response(200, headers={"content-type": "text/event-stream"},
                           content=b"data: [DONE]\n\n")


def sender(handler: Handler, retries: int = 2) -> tuple[StreamSender, list[httpx.Request]]:
    seen: list[httpx.Request] = []

    def record(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return handler(request)

    http = httpx.AsyncClient(transport=httpx.MockTransport(record))
    return StreamSender(http, "http://model.test/v1/", "sk-test", retries), seen


async def test_the_request_is_the_json_body_with_bearer_auth() -> None:
    send, seen = sender(lambda request: STREAM_OK)
    response = await send.send({"model": "m", "stream": True, "messages": []})
    assert response.status_code == 200
    [request] = seen
    assert str(request.url) == "http://model.test/v1/chat/completions"
    assert request.headers["authorization"] == "Bearer sk-test"
    assert request.headers["content-type"] == "application/json"
    assert json.loads(request.content) == {"model": "m", "stream": True, "messages": []}


async def test_a_lone_surrogate_goes_as_u_fffd_not_as_a_failure() -> None:
    """No UTF-8 body can hold one; the turn must not fail encoding it."""
    send, seen = sender(lambda request: STREAM_OK)
    await send.send({"messages": [{"role": "user", "content": "a\ud800b"}]})
    [request] = seen
    assert json.loads(request.content)["messages"][0]["content"] == "a\ufffdb"


async def test_a_5xx_then_a_stream_is_retried_and_streams() -> None:
    answers = iter([httpx.Response(503, headers=QUICK_RETRY), STREAM_OK])
    send, seen = sender(lambda request: next(answers))
    assert (await send.send({})).status_code == 200
    assert len(seen) == 2


async def test_retries_spent_is_an_upstream_error_with_the_status() -> None:
    send, seen = sender(lambda request: httpx.Response(
        500, headers=QUICK_RETRY, json={"error": "boom"}), retries=2)
    with pytest.raises(UpstreamError) as failed:
        await send.send({})
    assert (failed.value.code, failed.value.http_status) == ("upstream_error", 500)
    assert failed.value.message == "The model server failed (HTTP 500)."
    assert len(seen) == 3


@pytest.mark.parametrize("status", [400, 401, 404, 422])
async def test_a_client_error_is_not_retried(status: int) -> None:
    send, seen = sender(lambda request: httpx.Response(status))
    with pytest.raises(UpstreamError) as failed:
        await send.send({})
    assert failed.value.http_status == status and len(seen) == 1


async def test_the_server_may_forbid_a_retry() -> None:
    send, seen = sender(lambda request: httpx.Response(
        503, headers={"x-should-retry": "false"}))
    with pytest.raises(UpstreamError):
        await send.send({})
    assert len(seen) == 1


async def test_a_refused_connection_is_retried_then_unavailable() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    send, seen = sender(refuse, retries=0)
    with pytest.raises(UpstreamError) as failed:
        await send.send({})
    assert failed.value.code == "upstream_unavailable" and len(seen) == 1


def test_the_pause_is_what_the_server_asks_within_a_minute_else_backoff() -> None:
    assert retry_pause_s(0, httpx.Headers({"retry-after-ms": "250"})) == 0.25
    assert retry_pause_s(3, httpx.Headers({"retry-after": "2"})) == 2.0
    for attempt, ceiling in [(0, 0.5), (1, 1.0), (2, 2.0), (5, 8.0)]:
        pause = retry_pause_s(attempt, httpx.Headers({"retry-after": "3600"}))
        assert 0.75 * ceiling <= pause <= ceiling


@pytest.mark.parametrize(("status", "retried"), [
    (408, True), (409, True), (429, True), (500, True), (502, True), (400, False),
    (404, False),
])
def test_which_statuses_are_retried(status: int, retried: bool) -> None:
    assert should_retry(httpx.Response(status)) is retried


class Wire(httpx.AsyncBaseTransport):
    """Reads each request's body once, as a network transport does (MockTransport would
    keep it), and answers a short stream."""

    def __init__(self, *, keep_bodies: bool = True) -> None:
        self.sent: list[tuple[bytes, httpx.Headers]] = []
        self.keep_bodies = keep_bodies

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        assert isinstance(request.stream, httpx.AsyncByteStream)
        body = b"".join([chunk async for chunk in request.stream])
        self.sent.append((body if self.keep_bodies else b"", request.headers))
        if len(self.sent) == 1 and request.headers.get("x-fail-first"):
            return httpx.Response(503, headers=QUICK_RETRY)
        return httpx.Response(200, headers={"content-type": "text/event-stream"},
                              stream=httpx.ByteStream(b"data: [DONE]\n\n"))


async def test_the_body_goes_whole_with_its_length_and_again_on_a_retry() -> None:
    wire = Wire()
    http = httpx.AsyncClient(transport=wire, headers={"x-fail-first": "1"})
    send = StreamSender(http, "http://model.test/v1", "sk-test", 1)
    assert (await send.send({"messages": ["hi"]})).status_code == 200
    assert len(wire.sent) == 2
    for body, headers in wire.sent:
        assert json.loads(body) == {"messages": ["hi"]}
        assert headers["content-length"] == str(len(body))
        assert "transfer-encoding" not in headers


async def test_open_streams_do_not_keep_their_request_bodies() -> None:
    """An answer streams for minutes; its request's JSON (the whole history) is not held
    meanwhile."""
    send = StreamSender(httpx.AsyncClient(transport=Wire(keep_bodies=False)),
                        "http://model.test/v1", "k", 0)
    history = {"messages": [{"role": "user", "content": "x" * 100_000}]}
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        responses = [await send.send(history) for _ in range(20)]
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert all(response.status_code == 200 for response in responses)
    assert held < 20 * 100_000 / 4
