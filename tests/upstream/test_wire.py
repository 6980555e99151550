"""The model server's SSE body read by hand: the same events wherever the network cut the
bytes, LF or CRLF, comments and other fields skipped, an oversized event refused, and each
model name cleaned the same way every time."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.answer.choices import ChoicePiece
from app.answer.inputs import UpstreamChunk
from app.upstream import UpstreamError
from app.upstream import client as client_module
from app.upstream.client import UpstreamStream
from app.upstream.wire import (
    MAX_EVENT_BYTES,
    model_name,
    parse_choice_chunk,
    parse_chunk,
    sse_data,
)

BODY = (b": keep-alive\n\n"
        b"data: {\"a\": 1}\n\n"
        b"event: ignored\r\nid: 7\r\ndata: two\r\ndata: lines\r\n\r\n"
        b"data:no-space\n\n"
        b"data: [DONE]\n\n")
EVENTS = [b"{\"a\": 1}", b"two\nlines", b"no-space", b"[DONE]"]


def events_of(blocks: list[bytes]) -> list[bytes]:
    async def read() -> list[bytes]:
        async def source() -> AsyncIterator[bytes]:
            for block in blocks:
                yield block

        return [event async for event in sse_data(source())]

    return asyncio.run(read())


def cut(body: bytes, points: list[int]) -> list[bytes]:
    bounds = [0, *sorted({p % (len(body) + 1) for p in points}), len(body)]
    return [body[a:b] for a, b in itertools.pairwise(bounds)]


def test_whole_body_gives_each_events_data() -> None:
    assert events_of([BODY]) == EVENTS


@given(st.lists(st.integers(min_value=0, max_value=10_000), max_size=40))
def test_any_cut_of_the_body_gives_the_same_events(points: list[int]) -> None:
    assert events_of(cut(BODY, points)) == EVENTS


def test_one_byte_at_a_time_gives_the_same_events() -> None:
    assert events_of([BODY[i:i + 1] for i in range(len(BODY))]) == EVENTS


def test_an_event_the_body_ends_without_a_blank_line_still_counts() -> None:
    assert events_of([b"data: last"]) == [b"last"]
    assert events_of([b"data: a\ndata: b\n"]) == [b"a\nb"]


def test_an_oversized_event_is_refused_before_it_fills_the_memory() -> None:
    block = b"x" * 65536
    with pytest.raises(UpstreamError) as refused:
        events_of([b"data: ", *[block] * (MAX_EVENT_BYTES // len(block) + 2)])
    assert refused.value.code == "upstream_bad_response"


def test_a_model_name_is_cleaned_and_cut_the_same_way_each_time() -> None:
    odd = "gpt\x00-4\n" + "o" * 300
    assert model_name(odd) == model_name(odd) == ("gpt-4" + "o" * 300)[:255]
    assert model_name("") is None and model_name(None) is None


def parsed_piece(delta: dict[str, object]) -> ChoicePiece:
    return parse_choice_chunk({"choices": [{"index": 0, "delta": delta}]}).pieces[0]


def test_a_reasoning_delta_is_read_from_either_field() -> None:
    assert parsed_piece({"reasoning_content": "hmm"}).reasoning == "hmm"
    assert parsed_piece({"reasoning": "hmm"}).reasoning == "hmm"
    both = parsed_piece({"reasoning_content": "a", "reasoning": "b", "content": "x"})
    assert (both.reasoning, both.text) == ("a", "x")  # reasoning_content wins
    assert parsed_piece({"reasoning_content": None, "content": "x"}).reasoning == ""
    first = parse_chunk({"choices": [{"index": 0, "delta": {"reasoning": "r"}}]})
    assert (first.text, first.reasoning) == ("", "r")


@pytest.mark.parametrize("value", [1, ["a"], {"text": "a"}, True])
def test_a_reasoning_field_that_is_no_text_is_a_bad_response(value: object) -> None:
    with pytest.raises(UpstreamError) as bad:
        parsed_piece({"reasoning_content": value})
    assert bad.value.code == "upstream_bad_response"


def test_a_reasoning_delta_ends_the_first_token_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    """A model that thinks for longer than the first-token timeout still answers: its first
    reasoning delta is its first token. The clock jumps past the deadline after it."""
    events = [{"choices": [{"index": 0, "delta": {"reasoning_content": "Let me think"}}]},
              {"choices": [{"index": 0, "delta": {"content": "Done."},
                            "finish_reason": "stop"}]}]
    body = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)
    now = [1000.0]
    monkeypatch.setattr(client_module.time, "monotonic", lambda: now[0])

    async def read() -> list[UpstreamChunk]:
        response = httpx.Response(200, headers={"content-type": "text/event-stream"},
                                  stream=httpx.ByteStream(body + b"data: [DONE]\n\n"))
        stream = UpstreamStream(response, deadline=now[0] + 5)
        got = []
        async for chunk in stream.chunks():
            got.append(chunk)
            now[0] += 60  # long past the first-token deadline
        return got

    chunks = asyncio.run(read())
    assert [(c.reasoning, c.text) for c in chunks] == [("Let me think", ""), ("", "Done.")]
