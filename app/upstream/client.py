"""Streaming chat completions over the shared clients, in the gateway's own small types.

The first-token deadline (from sending the request to the first content delta) is separate
from the read timeout (the longest silence between bytes once the answer flows): a model may
think long before it starts, but must not stall mid-answer."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass
from typing import Any, cast

import httpx
import openai
from openai.types.chat import ChatCompletionChunk, ChatCompletionMessageParam

from app.sanitize import clean_text
from app.turns.inputs import Completion, ProviderUsage, UpstreamChunk
from app.upstream.errors import UPSTREAM_FAILURES, UpstreamError, classify


@dataclass(frozen=True, slots=True)
class UpstreamConfig:
    """The model server and how to call it: only what the upstream client needs of the
    gateway's settings (app.main maps them)."""

    base_url: str | None
    api_key: str
    model: str
    temperature: float
    max_tokens: int
    connect_timeout_s: float
    read_timeout_s: float
    first_token_timeout_s: float
    max_retries: int
    pool_size: int = 200


def make_http_client(config: UpstreamConfig) -> httpx.AsyncClient:
    """The process-wide HTTP client; its pool is shared by every upstream call. The gateway
    lets at most `pool_size` turns use it at once (app.services.upstream_slots), so a turn
    never waits here for a connection and a pool timeout is not mistaken for the model's."""
    timeout = httpx.Timeout(
        connect=config.connect_timeout_s,
        read=config.read_timeout_s,
        write=config.connect_timeout_s,
        pool=config.connect_timeout_s,
    )
    limits = httpx.Limits(max_connections=config.pool_size,
                          max_keepalive_connections=min(50, config.pool_size))
    return httpx.AsyncClient(timeout=timeout, limits=limits)


def make_openai_client(config: UpstreamConfig, http_client: httpx.AsyncClient
                       ) -> openai.AsyncOpenAI:
    """AsyncOpenAI over the shared HTTP client, with the same timeouts."""
    return openai.AsyncOpenAI(
        base_url=config.base_url,
        api_key=config.api_key,
        http_client=http_client,
        timeout=http_client.timeout,
        max_retries=config.max_retries,
    )



def _as_params(messages: Sequence[dict[str, str]]) -> list[ChatCompletionMessageParam]:
    """Our plain role/content dicts are valid chat message params."""
    return cast("list[ChatCompletionMessageParam]", list(messages))


#: llm_calls.model and the rollup's key are VARCHAR(255).
MODEL_NAME_MAX_CHARS = 255
#: A count no real call reaches; llm_calls' token columns are 32-bit integers.
MAX_REPORTED_TOKENS = 999_999_999


def _model_name(raw: str | None) -> str | None:
    """The model the server says answered, made fit for a row and a rollup key: a server's
    odd name (control characters, NUL, 300 characters) must not cost the answer its finish."""
    if not raw:
        return None
    printable = "".join(ch for ch in clean_text(raw) if ch.isprintable())
    return printable[:MODEL_NAME_MAX_CHARS].strip() or None


def _usage(raw: Any) -> ProviderUsage | None:
    """The provider's counts; counts no call can have (negative, absurdly large) are no usage
    at all, so the turn falls back to an estimate instead of storing nonsense or failing."""
    if raw is None:
        return None
    prompt = int(raw.prompt_tokens or 0)
    completion = int(raw.completion_tokens or 0)
    total = int(raw.total_tokens or prompt + completion)
    if not all(0 <= n <= MAX_REPORTED_TOKENS for n in (prompt, completion, total)):
        return None
    return ProviderUsage(prompt, completion, total)


def _chunk(raw: ChatCompletionChunk) -> UpstreamChunk:
    text = ""
    finish: str | None = None
    for choice in raw.choices:
        if choice.delta is not None and choice.delta.content:
            text += choice.delta.content
        finish = choice.finish_reason or finish
    return UpstreamChunk(text=text, usage=_usage(raw.usage), model=_model_name(raw.model),
                     finish_reason=finish)


class UpstreamStream:
    """An open streamed completion. Iterate `chunks()`; always `close()` (idempotent): it
    drops the HTTP connection at once, which tells the model server to stop generating."""

    def __init__(self, raw: openai.AsyncStream[ChatCompletionChunk], deadline: float) -> None:
        self._raw = raw
        self._iterator = raw.__aiter__()
        self._first_token_deadline: float | None = deadline
        self._closed = False

    async def chunks(self) -> AsyncGenerator[UpstreamChunk, None]:
        """Chunks in order; raises UpstreamError on a failure or a missed first token."""
        while True:
            try:
                raw = await self._next_raw()
            except StopAsyncIteration:
                return
            except UPSTREAM_FAILURES as exc:
                raise classify(exc) from exc
            chunk = _chunk(raw)
            if chunk.text:
                self._first_token_deadline = None
            yield chunk

    async def _next_raw(self) -> ChatCompletionChunk:
        if self._first_token_deadline is None:
            return await self._iterator.__anext__()
        remaining = self._first_token_deadline - time.monotonic()
        if remaining <= 0:
            raise UpstreamError("upstream_timeout", "no first token in time")
        try:
            async with asyncio.timeout(remaining):
                return await self._iterator.__anext__()
        except TimeoutError as exc:
            raise UpstreamError("upstream_timeout", "no first token in time") from exc

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            await self._raw.close()


class UpstreamClient:
    """The gateway's view of the model server."""

    def __init__(self, client: openai.AsyncOpenAI, config: UpstreamConfig) -> None:
        self._client = client
        self._config = config

    @property
    def model(self) -> str:
        return self._config.model

    def request_params(self, *, max_tokens: int | None = None) -> dict[str, Any]:
        """What is sent besides the messages (recorded in llm_calls metadata); `max_tokens`
        is the limit of a short call (title, summary) instead of the main one's."""
        return {
            "model": self._config.model,
            "temperature": self._config.temperature,
            "max_tokens": self._config.max_tokens if max_tokens is None else max_tokens,
        }

    async def open_stream(self, messages: Sequence[dict[str, str]]) -> UpstreamStream:
        """Send the request; the first-token deadline starts now and covers connecting too."""
        deadline = time.monotonic() + self._config.first_token_timeout_s
        try:
            async with asyncio.timeout(self._config.first_token_timeout_s):
                raw = await self._client.chat.completions.create(
                    messages=_as_params(messages),
                    model=self._config.model,
                    temperature=self._config.temperature,
                    max_tokens=self._config.max_tokens,
                    stream=True,
                    stream_options={"include_usage": True},
                )
        except UPSTREAM_FAILURES as exc:
            raise classify(exc) from exc
        return UpstreamStream(raw, deadline)

    async def complete(
        self, messages: Sequence[dict[str, str]], *, max_tokens: int,
        timeout_s: float | None = None,
    ) -> Completion:
        """A short non-streamed call (title and summary stages). `timeout_s` bounds the whole
        call, retries included (UpstreamError `upstream_timeout` when it runs out)."""
        try:
            async with asyncio.timeout(timeout_s):
                result = await self._client.chat.completions.create(
                    messages=_as_params(messages),
                    model=self._config.model,
                    temperature=self._config.temperature,
                    max_tokens=max_tokens,
                    stream=False,
                )
        except UPSTREAM_FAILURES as exc:
            raise classify(exc) from exc
        text = (result.choices[0].message.content or "") if result.choices else ""
        return Completion(text=text, usage=_usage(result.usage), model=_model_name(result.model))
