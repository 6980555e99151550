"""The thinking scenarios over real loopback HTTP, read by the real OpenAI SDK: the reasoning
field's deltas before any content, inline thinking paced slower than the answer, and usage
reporting reasoning tokens as reasoning models do."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx
import openai

from app.demo_llm import DemoSettings
from app.demo_llm.scenarios import ChatInput, count_tokens, plan_reply, thinking_text
from tests.demo_llm.streaming import user_message


def _reasoning_of(delta: Any) -> str | None:
    extra = delta.model_extra or {}
    value = extra.get("reasoning_content")
    return value if isinstance(value, str) else None


async def _stream(llm: openai.AsyncOpenAI, text: str) -> list[tuple[float, str, str]]:
    """(arrival, channel, piece) of each delta, and the usage chunk as ("usage", ...)."""
    got: list[tuple[float, str, str]] = []
    stream = await llm.chat.completions.create(
        model="demo-1", messages=user_message(text), stream=True,  # type: ignore[arg-type]
        stream_options={"include_usage": True})
    async for chunk in stream:
        now = time.monotonic()
        if chunk.usage is not None:
            got.append((now, "usage", chunk.usage.model_dump_json()))
        for choice in chunk.choices:
            if (reasoning := _reasoning_of(choice.delta)) is not None:
                got.append((now, "reasoning", reasoning))
            if choice.delta.content:
                got.append((now, "content", choice.delta.content))
    return got


def _client(url: str, http: httpx.AsyncClient) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="demo", http_client=http,
                              max_retries=0)


async def test_think_field_sends_its_thinking_in_reasoning_content_before_the_answer(
        llm: openai.AsyncOpenAI) -> None:
    got = await _stream(llm, "[think-field] Hi")
    channels = [channel for _, channel, _ in got]
    first_content = channels.index("content")
    assert set(channels[:first_content]) == {"reasoning"}
    assert "reasoning" not in channels[first_content:]
    thinking = "".join(piece for _, channel, piece in got if channel == "reasoning")
    answer = "".join(piece for _, channel, piece in got if channel == "content")
    assert thinking == thinking_text(ChatInput("", "[think-field] Hi"))
    usage = openai.types.CompletionUsage.model_validate_json(got[-1][2])
    assert usage.completion_tokens == count_tokens(thinking + answer)
    assert usage.completion_tokens_details is not None
    assert usage.completion_tokens_details.reasoning_tokens == count_tokens(thinking)


async def test_inline_thinking_reports_its_reasoning_tokens_and_a_plain_answer_none(
        llm: openai.AsyncOpenAI) -> None:
    got = await _stream(llm, "[think] Hi")
    reply = plan_reply(ChatInput("", "[think] Hi"))
    text = "".join(piece for _, channel, piece in got if channel == "content")
    assert text == reply.text and "reasoning" not in [c for _, c, _ in got]
    usage = openai.types.CompletionUsage.model_validate_json(got[-1][2])
    assert usage.completion_tokens_details is not None
    assert usage.completion_tokens_details.reasoning_tokens == count_tokens(
        "".join(reply.pieces[:reply.thinking_pieces]))
    plain = await _stream(llm, "Hi")
    assert '"completion_tokens_details":null' in plain[-1][2]


async def test_thinking_is_paced_slower_than_the_answer(
        start_demo: Callable[[DemoSettings], str]) -> None:
    """A page shows "Thinking…" a moment: each thinking piece waits `think_ms`, the answer's
    pieces `delay_ms` (here none)."""
    url = start_demo(DemoSettings(delay_ms=0, think_ms=10))
    async with httpx.AsyncClient(timeout=10) as http:
        got = await _stream(_client(url, http), "[think-field] Hi")
    reasoning = [at for at, channel, _ in got if channel == "reasoning"]
    assert reasoning[-1] - reasoning[0] >= (len(reasoning) - 1) * 0.010


async def test_a_non_streamed_field_answer_carries_its_reasoning_content(
        llm: openai.AsyncOpenAI) -> None:
    completion = await llm.chat.completions.create(
        model="demo-1", messages=user_message("[think-field] Hi"))  # type: ignore[arg-type]
    message = completion.choices[0].message
    thinking = thinking_text(ChatInput("", "[think-field] Hi"))
    assert (message.model_extra or {})["reasoning_content"] == thinking
    assert "<think>" not in (message.content or "")
    assert completion.usage is not None and completion.usage.completion_tokens_details is not None
    assert completion.usage.completion_tokens_details.reasoning_tokens == count_tokens(thinking)
