"""The choice-by-choice reading of a streamed completion (app.upstream.wire's
parse_choice_chunk over UpstreamClient.open_stream) against a
scripted model server over loopback: choices kept apart, tool call deltas untouched, the
client's fields sent as they came, and the same failures as the native reading."""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import aclosing
from typing import Any

import pytest

from app.answer.choices import ChoiceChunk, ChoicePiece
from app.config.settings import Settings
from app.gateway.main import upstream_config
from app.upstream import UpstreamClient, UpstreamError, make_http_client, make_openai_client
from app.upstream.wire import parse_choice_chunk, parse_chunk
from tests.support.scripted_upstream import scripted_upstream


def body(*events: Any, done: bool = True) -> bytes:
    text = "".join(f"data: {json.dumps(e)}\n\n" for e in events)
    return (text + ("data: [DONE]\n\n" if done else "")).encode()


def chunk(*choices: dict[str, Any]) -> dict[str, Any]:
    return {"id": "x", "object": "chat.completion.chunk", "model": "m", "choices": list(choices)}


async def read(base_url: str, params: dict[str, Any]) -> list[ChoiceChunk]:
    settings = Settings(upstream_base_url=base_url, upstream_max_retries=0,
                        first_token_timeout_s=5)
    config = upstream_config(settings)
    http = make_http_client(config)
    client = UpstreamClient(make_openai_client(config, http), config, http)
    try:
        stream = await client.open_stream([{"role": "user", "content": "hi"}], params)
        try:
            async with aclosing(stream.read(parse_choice_chunk)) as chunks:
                return [c async for c in chunks]
        finally:
            await stream.close()
    finally:
        await http.aclose()


async def test_choices_and_tool_calls_are_kept_apart() -> None:
    call = {"index": 0, "id": "c", "type": "function", "function": {"name": "f", "arguments": ""}}
    answer = body(chunk({"index": 0, "delta": {"content": "a"}},
                        {"index": 1, "delta": {"tool_calls": [call]}}),
                  chunk({"index": 1, "delta": {}, "finish_reason": "tool_calls"}))
    async with scripted_upstream(answer) as url:
        chunks = await read(url, {"n": 2, "tools": [{"type": "function"}]})
    assert chunks[0].pieces == (ChoicePiece(0, "a"), ChoicePiece(1, tool_calls=(call,)))
    assert chunks[1].finish_reason == "tool_calls"


async def test_a_body_cut_before_its_end_is_truncated() -> None:
    async with scripted_upstream(body(chunk({"index": 0, "delta": {"content": "a"}}),
                                      done=False)) as url:
        with pytest.raises(UpstreamError) as caught:
            await read(url, {})
    assert caught.value.code == "upstream_truncated"


@pytest.mark.parametrize("bad", [
    {"choices": [{"index": -1, "delta": {}}]},
    {"choices": [{"index": True, "delta": {}}]},
    {"choices": [{"index": 0, "delta": {"tool_calls": "x"}}]},
    {"choices": [{"index": 0, "delta": {"content": 3}}]},
    {"choices": [{"index": 0, "delta": []}]},
    {"choices": "x"},
    [],
])
@pytest.mark.parametrize("parse", [parse_choice_chunk, parse_chunk])
def test_malformed_chunks_are_bad_responses_on_both_surfaces(
        bad: Any, parse: Callable[[Any], object]) -> None:
    with pytest.raises(UpstreamError) as caught:
        parse(bad)
    assert caught.value.code == "upstream_bad_response"


def test_the_native_turn_reads_choice_0_of_the_same_parse() -> None:
    parsed = parse_chunk({"model": "m-1", "usage": {"prompt_tokens": 2, "completion_tokens": 1},
                          "choices": [{"index": 1, "delta": {"content": "other"}},
                                      {"index": 0, "delta": {"content": "mine"},
                                       "finish_reason": "stop"}]})
    assert (parsed.text, parsed.finish_reason, parsed.model) == ("mine", "stop", "m-1")
    assert parsed.usage is not None and parsed.usage.total_tokens == 3
    closing = parse_chunk({"choices": [], "usage": {"prompt_tokens": 2, "completion_tokens": 1}})
    assert (closing.text, closing.finish_reason, closing.usage) == ("", None, parsed.usage)


def test_an_error_event_is_the_model_server_s_failure() -> None:
    with pytest.raises(UpstreamError) as caught:
        parse_choice_chunk({"error": {"message": "overloaded"}})
    assert caught.value.code == "upstream_error"
