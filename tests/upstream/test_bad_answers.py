"""What a model server (or a proxy in front of it) may send instead of a whole, well-formed
chat completion stream, served byte for byte over loopback: a body that stops, a page that
is no event stream, data that is no JSON, chunks of the wrong shape. Each is one code the
turn stores (`upstream_truncated`, `upstream_bad_response`), after the text that came."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import get_args

import pytest
import structlog

from app.answer.inputs import UpstreamChunk
from app.config.settings import Settings
from app.gateway.main import upstream_config
from app.upstream import UpstreamClient, UpstreamError, make_http_client, make_openai_client
from app.upstream.errors import UpstreamErrorCode
from tests.support.scripted_upstream import (
    completion_chunk,
    finish_chunk,
    scripted_upstream,
    sse_body,
    usage_chunk,
)

CONVERSATION = [{"role": "system", "content": "Be brief."},
                {"role": "user", "content": "SECRET-USER-TEXT"}]


@asynccontextmanager
async def served(body: bytes, **answer: str) -> AsyncIterator[UpstreamClient]:
    """An UpstreamClient, as the gateway builds it, whose server answers with `body`."""
    async with scripted_upstream(body, **answer) as base_url:
        config = upstream_config(Settings(
            upstream_base_url=base_url, upstream_max_retries=0, first_token_timeout_s=5.0,
            upstream_read_timeout_s=5.0, upstream_connect_timeout_s=2.0))
        http = make_http_client(config)
        try:
            yield UpstreamClient(make_openai_client(config, http), config, http)
        finally:
            await http.aclose()


async def read(body: bytes, **answer: str) -> tuple[list[UpstreamChunk], UpstreamError | None]:
    """The chunks of the streamed answer, and the error that ended it (None: a whole one)."""
    chunks: list[UpstreamChunk] = []
    async with served(body, **answer) as client:
        try:
            stream = await client.open_stream(CONVERSATION)
        except UpstreamError as exc:
            return chunks, exc
        try:
            async for chunk in stream.chunks():
                chunks.append(chunk)
        except UpstreamError as exc:
            return chunks, exc
        finally:
            await stream.close()
    return chunks, None


def text(chunks: list[UpstreamChunk]) -> str:
    return "".join(c.text for c in chunks)


def events(*data: str) -> bytes:
    return "".join(f"data: {d}\n\n" for d in data).encode()


async def test_a_body_that_stops_without_finish_or_done_is_truncated() -> None:
    chunks, error = await read(sse_body(["Hello", " wor"], tail=""))
    assert text(chunks) == "Hello wor"
    assert error is not None and error.code == "upstream_truncated"
    assert error.message == "The model server's answer broke off before its end."


async def test_an_empty_200_is_truncated() -> None:
    chunks, error = await read(b"")
    assert chunks == [] and error is not None and error.code == "upstream_truncated"


@pytest.mark.parametrize("body", [
    events(completion_chunk("Hello"), finish_chunk("stop")),  # finish_reason, no [DONE]
    events(completion_chunk("Hello"), "[DONE]"),  # [DONE], no finish_reason
    events(completion_chunk("Hello"), finish_chunk("length"), usage_chunk(3, 1, 4), "[DONE]"),
])
async def test_either_end_signal_makes_a_whole_answer(body: bytes) -> None:
    chunks, error = await read(body)
    assert error is None and text(chunks) == "Hello"


async def test_nothing_after_done_is_read() -> None:
    chunks, error = await read(events(completion_chunk("Hello"), "[DONE]", "not json"))
    assert error is None and text(chunks) == "Hello"


async def test_crlf_lines_comments_other_fields_and_split_data_lines_are_read() -> None:
    first, second = completion_chunk("Hel"), json.dumps(json.loads(completion_chunk("lo")),
                                                         indent=1)
    split = "".join(f"data:{line}\r\n" for line in second.splitlines())
    body = (f": keep-alive\r\n\r\nevent: message\r\nid: 1\r\ndata: {first}\r\n\r\n"
            f"{split}\r\ndata: [DONE]\r\n\r\n").encode()
    chunks, error = await read(body)
    assert error is None and text(chunks) == "Hello"


async def test_a_lone_surrogate_escape_is_still_read() -> None:
    """orjson refuses it; the turn replaces and counts it, as it always did."""
    chunks, error = await read(sse_body(["broken \ud83d pair"]))
    assert error is None and text(chunks) == "broken \ud83d pair"


@pytest.mark.parametrize(("content_type", "body"), [
    ("text/html; charset=utf-8", b"<html><body>502 Bad Gateway</body></html>"),
    ("application/json", json.dumps({"choices": [{"message": {"content": "hi"}}]}).encode()),
    ("text/plain", sse_body(["Hello"])),
])
async def test_a_200_that_is_no_event_stream_is_a_bad_response(
    content_type: str, body: bytes
) -> None:
    with structlog.testing.capture_logs() as logs:
        chunks, error = await read(body, content_type=content_type)
    assert chunks == [] and error is not None and error.code == "upstream_bad_response"
    assert error.message == "The model server sent an answer the gateway cannot read."
    [line] = [entry for entry in logs if entry["event"] == "upstream_failed"]
    assert line["log_level"] == "warning" and line["http_status"] == 200
    assert content_type in line["reason"] and line["detail"]


MALFORMED = {
    "data is not json": 'data: {"id": "c1", "choi\n\n',
    "content is a number": '{"choices": [{"delta": {"content": 5}}]}',
    "no choices": '{"id": "c1", "model": "m"}',
    "choices not a list": '{"choices": {"0": {"delta": {"content": "x"}}}}',
    "choice not an object": '{"choices": ["x"]}',
    "delta not an object": '{"choices": [{"delta": "x"}]}',
    "finish_reason a number": '{"choices": [{"delta": {}, "finish_reason": 1}]}',
    "usage not an object": '{"choices": [], "usage": [1, 2]}',
    "chunk is an array": '[{"choices": []}]',
    "chunk is a string": '"hello"',
    "chunk is null": "null",
}


@pytest.mark.parametrize("bad", MALFORMED.values(), ids=list(MALFORMED))
async def test_a_malformed_chunk_is_a_bad_response_after_the_text_so_far(bad: str) -> None:
    tail = bad if bad.startswith("data:") else f"data: {bad}\n\ndata: [DONE]\n\n"
    chunks, error = await read(sse_body(["Hello"], tail=tail))
    assert text(chunks) == "Hello"
    assert error is not None and error.code == "upstream_bad_response"


async def test_an_oversized_event_fails_the_answer_after_the_text_before_it() -> None:
    chunks, error = await read(sse_body(["Hello"], tail="data: " + "x" * (2 << 20)))
    assert text(chunks) == "Hello"
    assert error is not None and error.code == "upstream_bad_response"


async def test_odd_usage_counts_are_no_usage_not_a_failure() -> None:
    odd = json.dumps({"choices": [], "usage": {"prompt_tokens": "3", "completion_tokens": 1.5}})
    chunks, error = await read(sse_body(["Hello"], tail=f"data: {odd}\n\ndata: [DONE]\n\n"))
    assert error is None and [c.usage for c in chunks] == [None, None]


async def test_an_error_object_in_the_stream_is_an_upstream_error_told_briefly() -> None:
    error_event = json.dumps({"error": {"message": "overloaded, echo: SECRET-USER-TEXT"}})
    with structlog.testing.capture_logs() as logs:
        chunks, error = await read(sse_body(["Hello"], tail=f"data: {error_event}\n\n"))
    assert text(chunks) == "Hello"
    assert error is not None and error.code == "upstream_error"
    assert error.message == "The model server failed."
    [line] = [entry for entry in logs if entry["event"] == "upstream_failed"]
    assert line["detail"].startswith("overloaded")


async def test_an_http_error_is_one_short_sentence_and_its_body_goes_to_the_log() -> None:
    body = json.dumps({"error": {"message": "upstream exploded " + "x" * 2000}}).encode()
    with structlog.testing.capture_logs() as logs:
        _, error = await read(body, status="500 Internal Server Error",
                                   content_type="application/json")
    assert error is not None and error.code == "upstream_error" and error.http_status == 500
    assert error.message == "The model server failed (HTTP 500)."
    [line] = [entry for entry in logs if entry["event"] == "upstream_failed"]
    assert line["log_level"] == "warning" and line["code"] == "upstream_error"
    assert line["http_status"] == 500 and "upstream exploded" in line["detail"]
    assert len(line["detail"]) <= 503


def test_the_sentences_users_read() -> None:
    assert [UpstreamError(code).message for code in get_args(UpstreamErrorCode)] == [
        "The model server could not be reached.", "The model server did not answer in time.",
        "The model server failed.", "The model server's answer broke off before its end.",
        "The model server sent an answer the gateway cannot read.",
        "The answer took longer than the gateway allows and was cut."]
    assert UpstreamError("upstream_error", http_status=429).message == (
        "The model server failed (HTTP 429).")


