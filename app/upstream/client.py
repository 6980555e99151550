"""Streaming chat completions over the shared clients, in the gateway's own small types.
The streamed request goes over the shared httpx client (app.upstream.sending: retries, status
errors) and its body is read by hand (app.upstream.wire), so a cut or malformed answer is
told from a whole one; the short non-streamed calls go through the openai SDK.

The first-token deadline (from sending the request to the first content or reasoning delta:
a reasoning model's thinking is its first token) is separate
from the read timeout (the longest silence between bytes once the answer flows): a model may
think long before it starts, but must not stall mid-answer. The answer deadline
(`max_answer_s` from sending the request) bounds the whole answer: a model that drips a token
now and then would otherwise hold its slot, its thread and its user's stream cap forever."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import time
import urllib.request
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping, Sequence
from contextlib import aclosing
from dataclasses import dataclass, replace
from typing import Any, Protocol, TypeVar, cast

import httpx
import openai
from openai.types.chat import ChatCompletionMessageParam

from app.answer.inputs import Completion, UpstreamChunk
from app.upstream.errors import (
    LOGGED_DETAIL_CHARS,
    UPSTREAM_FAILURES,
    UpstreamError,
    body_head,
    classify,
    upstream_failure,
)
from app.upstream.sending import StreamSender
from app.upstream.transport import AiohttpTransport
from app.upstream.wire import DONE, decode, model_name, parse_chunk, sse_data, usage_of


@dataclass(frozen=True, slots=True)
class UpstreamConfig:
    """The model server and how to call it: only what the upstream client needs of the
    gateway's settings (app.gateway.main maps them)."""

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
    #: The longest a streamed answer may take from its request; None: unbounded.
    max_answer_s: float | None = None


def make_http_client(config: UpstreamConfig) -> httpx.AsyncClient:
    """The process-wide HTTP client; its pool is shared by every upstream call. The gateway
    lets at most `pool_size` turns use it at once (app.turn.holds.slots), so a turn
    never waits here for a connection and a pool timeout is not mistaken for the model's.
    Its transport is aiohttp's (app.upstream.transport) unless the environment names a
    proxy: httpx's own then applies it, with its NO_PROXY rules, as any httpx client would."""
    timeout = httpx.Timeout(
        connect=config.connect_timeout_s,
        read=config.read_timeout_s,
        write=config.connect_timeout_s,
        pool=config.connect_timeout_s,
    )
    if urllib.request.getproxies():
        limits = httpx.Limits(max_connections=config.pool_size,
                              max_keepalive_connections=min(50, config.pool_size))
        return httpx.AsyncClient(timeout=timeout, limits=limits)
    return httpx.AsyncClient(timeout=timeout, transport=AiohttpTransport())


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



def _as_params(messages: Sequence[Mapping[str, Any]]) -> list[ChatCompletionMessageParam]:
    """Our plain role/content dicts (and a client's checked messages) are valid params."""
    return cast("list[ChatCompletionMessageParam]", list(messages))


class StreamChunk(Protocol):
    """What the stream reads of any parsed chunk: its text and its reasoning (the first-token
    deadline ends with the first of either: a long think is the model at work) and its
    finish reason (an answer without one and without [DONE] is cut)."""

    @property
    def text(self) -> str: ...

    @property
    def reasoning(self) -> str: ...

    @property
    def finish_reason(self) -> str | None: ...


ChunkT = TypeVar("ChunkT", bound=StreamChunk)

#: The media type of an event stream; a 200 with any other is no streamed answer.
EVENT_STREAM = "text/event-stream"


class UpstreamStream:
    """An open streamed completion over the raw HTTP response. Iterate `chunks()`; always
    `close()` (idempotent): it drops the HTTP connection at once, which tells the model server
    to stop generating."""

    def __init__(self, response: httpx.Response, deadline: float,
                 answer_deadline: float | None = None) -> None:
        self._response = response
        self._first_token_deadline: float | None = deadline
        self._answer_deadline = answer_deadline
        self._closed = False

    def chunks(self) -> AsyncGenerator[UpstreamChunk, None]:
        """Chunks in order, until `data: [DONE]` or the end of the body. Raises UpstreamError
        on a failure, a missed first token, a malformed chunk (`upstream_bad_response`) or a
        body that ends with neither [DONE] nor a finish_reason (`upstream_truncated`: the
        server or a proxy cut it, and the answer is not whole) or an answer past its deadline
        (`answer_too_long`)."""
        return self.read(parse_chunk)

    async def read(self, parse: Callable[[Any], ChunkT]) -> AsyncGenerator[ChunkT, None]:
        """`chunks()` with each event's JSON made a chunk by `parse` (the OpenAI-compatible
        endpoint reads choice by choice, app.upstream.wire.parse_choice_chunk)."""
        finished = False
        async with aclosing(sse_data(_body_blocks(self._response))) as events:
            while True:
                try:
                    data = await self._next(events)
                except StopAsyncIteration:
                    break
                except UPSTREAM_FAILURES as exc:
                    raise classify(exc) from exc
                if data.strip() == DONE:
                    await _drain(events)
                    return
                chunk = parse(decode(data))
                finished = finished or chunk.finish_reason is not None
                if chunk.text or chunk.reasoning:
                    self._first_token_deadline = None
                yield chunk
        if not finished:
            raise upstream_failure("upstream_truncated", reason="no_done_no_finish_reason")

    async def _next(self, events: AsyncIterator[bytes]) -> bytes:
        """The next event's data, within the first-token deadline until text has come. Once
        text flows the answer's deadline is checked between events, a comparison of the clock
        and no timer: a timer per event is CPU and a heap of cancelled timers for the event
        loop on every chunk, and a model that stops mid-answer is bounded by the read
        timeout already, so an answer ends at its first event past the deadline."""
        if self._first_token_deadline is None:
            if self._answer_deadline is not None and time.monotonic() >= self._answer_deadline:
                raise _answer_too_long()
            return await anext(events)
        deadline, missed = self._deadline()
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise missed()
        try:
            async with asyncio.timeout(remaining):
                return await anext(events)
        except TimeoutError as exc:
            raise missed() from exc

    def _deadline(self) -> tuple[float, Callable[[], UpstreamError]]:
        """Before the first text, the nearer of the two deadlines, and the error of missing
        it."""
        first, answer = self._first_token_deadline, self._answer_deadline
        assert first is not None
        if answer is not None and answer <= first:
            return answer, _answer_too_long
        return first, _no_first_token

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            await self._response.aclose()


def _answer_too_long() -> UpstreamError:
    return upstream_failure("answer_too_long", reason="max_answer_s")


def _no_first_token() -> UpstreamError:
    return upstream_failure("upstream_timeout", reason="no_first_token")


#: After `[DONE]` only the body's end should follow; what comes within this long (and these
#: few events) is read, so the connection goes back to the pool for the next turn.
DRAIN_S, DRAIN_EVENTS = 1.0, 4


async def _drain(events: AsyncIterator[bytes]) -> None:
    """The rest of a finished answer's body, normally just its last chunk, already here. A
    body that is not read to its end cannot be reused: every turn would open a new connection
    to the model server. A server that holds the body open or keeps sending after [DONE] is
    cut (the answer is whole either way)."""
    with contextlib.suppress(StopAsyncIteration, TimeoutError, UpstreamError, *UPSTREAM_FAILURES):
        async with asyncio.timeout(DRAIN_S):
            for _ in range(DRAIN_EVENTS):
                await anext(events)


def _body_blocks(response: httpx.Response) -> AsyncIterator[bytes]:
    """The body as it arrives: raw when it is not content-encoded (nearly always for an
    event stream), which spares every chunk httpx's decoder layer; else decoded."""
    encoding = response.headers.get("content-encoding", "identity").strip().lower()
    return response.aiter_raw() if encoding == "identity" else response.aiter_bytes()


async def _refuse_non_stream(response: httpx.Response) -> UpstreamError:
    """A 200 that is not an event stream (a proxy's HTML page, a JSON answer): its type and
    the start of its body go to the log, the connection is dropped."""
    head = await body_head(response, LOGGED_DETAIL_CHARS)
    return upstream_failure(
        "upstream_bad_response", http_status=response.status_code,
        reason=f"content_type={response.headers.get('content-type', '')[:100]}",
        detail=head)


class UpstreamClient:
    """The gateway's view of the model server."""

    def __init__(self, client: openai.AsyncOpenAI, config: UpstreamConfig,
                 http: httpx.AsyncClient) -> None:
        self._client = client
        self._config = config
        timeout = httpx.Timeout(connect=config.connect_timeout_s, read=config.read_timeout_s,
                                write=config.connect_timeout_s, pool=config.connect_timeout_s)
        self._sender = StreamSender(http, str(client.base_url), config.api_key,
                                    config.max_retries, timeout)
        self._http = http
        #: The most tokens an answer of this client may run to, whatever a request asks.
        self._token_cap: int | None = None

    def limited(self, max_tokens: int) -> UpstreamClient:
        """This client with its answers held to `max_tokens` (a key's budget left for the
        day): its own limit and any a request's params ask for are lowered to it, never
        raised. Shares everything else (the SDK client, the pool, the sender)."""
        capped = copy.copy(self)
        capped._config = replace(self._config, max_tokens=min(self._config.max_tokens,
                                                              max_tokens))
        capped._token_cap = max_tokens if self._token_cap is None else min(self._token_cap,
                                                                           max_tokens)
        return capped

    async def reachable(self, timeout_s: float) -> bool:
        """The model server answers HTTP at all (`GET {base_url}/models`, whatever its
        status): what /readyz calls reachable. No connection, a refused one or a timeout is
        not; nothing is raised."""
        if not self._config.base_url:
            return False
        url = self._config.base_url.rstrip("/") + "/models"
        try:
            response = await self._http.get(url, timeout=timeout_s, headers={
                "Authorization": f"Bearer {self._config.api_key}"})
        except (TimeoutError, httpx.HTTPError, OSError):
            return False
        await response.aclose()
        return True

    @property
    def model(self) -> str:
        return self._config.model

    @property
    def openai(self) -> openai.AsyncOpenAI:
        """The SDK client of the short calls."""
        return self._client

    @property
    def base_url(self) -> str | None:
        return self._config.base_url

    @property
    def first_token_timeout_s(self) -> float:
        return self._config.first_token_timeout_s

    def answer_deadline(self) -> float | None:
        """The monotonic time by which an answer requested now must have ended, if any."""
        if self._config.max_answer_s is None:
            return None
        return time.monotonic() + self._config.max_answer_s

    def request_params(self, *, max_tokens: int | None = None) -> dict[str, Any]:
        """What is sent besides the messages (recorded in llm_calls metadata); `max_tokens`
        is the limit of a short call (title, summary) instead of the main one's."""
        return {
            "model": self._config.model,
            "temperature": self._config.temperature,
            "max_tokens": self._config.max_tokens if max_tokens is None else max_tokens,
        }

    async def open_stream(self, messages: Sequence[Mapping[str, Any]],
                          params: Mapping[str, Any] | None = None) -> UpstreamStream:
        """Send the request (with a client's own `params`, as send_stream sends them); the
        first-token and answer deadlines start now and cover connecting too. Read it with
        `chunks()`, or `read(parse_choice_chunk)` for every choice."""
        deadline = time.monotonic() + self._config.first_token_timeout_s
        answer_deadline = self.answer_deadline()
        return UpstreamStream(await self.send_stream(messages, params), deadline,
                              answer_deadline)

    async def send_stream(self, messages: Sequence[Mapping[str, Any]],
                          params: Mapping[str, Any] | None = None) -> httpx.Response:
        """The streamed answer's response, its body unread, refused unless it is an event
        stream. `params` (the OpenAI-compatible endpoint's) are a client's own request
        fields, sent as they are over the gateway's defaults."""
        response = await self._send_streaming(messages, params)
        media_type = response.headers.get("content-type", "").split(";", 1)[0].strip()
        if media_type.lower() != EVENT_STREAM:
            raise await _refuse_non_stream(response)
        return response

    async def _send_streaming(self, messages: Sequence[Mapping[str, Any]],
                              params: Mapping[str, Any] | None = None) -> httpx.Response:
        """The request (app.upstream.sending: retries, status errors), answered with the raw
        HTTP response whose body is still unread. A response that arrived just as the deadline
        struck is closed, not left to the garbage collector with its connection."""
        body: dict[str, Any] = {
            "messages": list(messages), "model": self._config.model,
            "temperature": self._config.temperature, "max_tokens": self._config.max_tokens,
            "stream": True, "stream_options": {"include_usage": True},
        }
        if params:  # the client's own fields win; its own token limit replaces ours
            if "max_completion_tokens" in params or "max_tokens" in params:
                del body["max_tokens"]
            body.update(params)
        if self._token_cap is not None:
            for key in ("max_tokens", "max_completion_tokens"):
                asked = body.get(key)
                if isinstance(asked, int) and asked > self._token_cap:
                    body[key] = self._token_cap
        response: httpx.Response | None = None
        try:
            async with asyncio.timeout(self._config.first_token_timeout_s):
                response = await self._sender.send(body)
        except UPSTREAM_FAILURES as exc:
            if response is not None:
                await response.aclose()
            raise classify(exc) from exc
        return response

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
        usage = usage_of(result.usage.model_dump()) if result.usage else None
        return Completion(text=text, usage=usage, model=model_name(result.model))
