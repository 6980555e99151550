"""The demo model's HTTP shell: OpenAI-compatible routes over the pure scenarios.

Streams are plain `data: <json>\\n\\n` frames ending with `data: [DONE]`, exactly what the
OpenAI SDK parses. Starlette's StreamingResponse cancels the body generator when the client
disconnects (uvicorn speaks ASGI spec 2.3), which is how a cancelled stream is noticed.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from app.demo_llm.options import DemoSettings
from app.demo_llm.scenarios import (
    Reply,
    apply_max_tokens,
    chat_input,
    continue_reply,
    continued_from,
    count_tokens,
    plan_completion,
    plan_reply,
    prompt_tokens,
)
from app.demo_llm.seen import Recorder, StreamOutcome
from app.demo_llm.tool_calls import planned_tool_call, tool_call_deltas
from app.observe.logging import get_logger

log = get_logger("demo_llm")

#: The most choices the demo model streams for one request (`n`).
MAX_N = 8


class StreamAborted(Exception):
    """Raised inside a stream to cut the connection without finishing the response."""


class AbortableStreamingResponse(StreamingResponse):
    """A StreamingResponse that, on StreamAborted, returns without completing the body.

    uvicorn then closes the connection, so the client sees a transport error mid-stream
    (an incomplete chunked body), as with a crashed model server, without a traceback.
    """

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        except StreamAborted:
            log.info("demo_stream_aborted")


class ChunkWriter:
    """Serialises chat.completion.chunk frames for one response."""

    def __init__(self, model: str, include_usage: bool) -> None:
        self.completion_id = f"chatcmpl-demo{uuid.uuid4().hex[:20]}"
        self.created = int(time.time())
        self.model = model
        self.include_usage = include_usage

    def _frame(self, choices: list[dict[str, Any]], usage: dict[str, Any] | None) -> bytes:
        chunk: dict[str, Any] = {
            "id": self.completion_id, "object": "chat.completion.chunk",
            "created": self.created, "model": self.model, "system_fingerprint": None,
            "choices": choices,
        }
        if self.include_usage or usage is not None:
            chunk["usage"] = usage
        data = json.dumps(chunk, ensure_ascii=False, separators=(",", ":"))
        return b"data: " + data.encode() + b"\n\n"

    def delta(self, delta: dict[str, Any], finish_reason: str | None = None,
              index: int = 0) -> bytes:
        """One choice delta (role, content or the final empty delta with finish_reason)."""
        choice = {"index": index, "delta": delta, "logprobs": None,
                  "finish_reason": finish_reason}
        return self._frame([choice], None)

    def malformed_delta(self) -> bytes:
        """A chunk no client can read as text: `content` is a number."""
        return self._frame([{"index": 0, "delta": {"content": 5}, "finish_reason": None}],
                           None)

    def usage(self, prompt: int, completion: int, reasoning: int | None = None) -> bytes:
        """The include_usage chunk: no choices, only usage."""
        return self._frame([], usage_dict(prompt, completion, reasoning))


def usage_dict(prompt: int, completion: int, reasoning: int | None = None) -> dict[str, Any]:
    """OpenAI's usage object; with `reasoning`, its reasoning tokens (a part of the completion
    tokens) in `completion_tokens_details`, as reasoning models report them."""
    usage: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion,
                             "total_tokens": prompt + completion}
    if reasoning is not None:
        usage["completion_tokens_details"] = {"reasoning_tokens": reasoning}
    return usage


def error_response(status: int, message: str, code: str, kind: str) -> JSONResponse:
    """An OpenAI-style error body (which also has the gateway's `code` and `message`)."""
    body = {"error": {"message": message, "type": kind, "param": None, "code": code}}
    return JSONResponse(body, status_code=status)


@dataclass(frozen=True)
class Shape:
    """What the request asked of the answer's form: how many choices, and the tool call the
    model makes instead of answering (app.demo_llm.tool_calls)."""

    n: int = 1
    tool_call: dict[str, Any] | None = None


async def stream_frames(
    reply: Reply, writer: ChunkWriter, settings: DemoSettings, recorder: Recorder, prompt: int,
    shape: Shape = Shape(),
) -> AsyncIterator[bytes]:
    """Role chunk, reasoning deltas (`reasoning_content`) and content deltas (each sent for
    every choice) at the configured pace, thinking slower, finish chunk, usage, [DONE]; or,
    for a tool call, its deltas and `tool_calls`."""
    recorder.stream_started()
    outcome: StreamOutcome = "cancelled"
    sent: list[str] = []
    choices = range(shape.n)
    think_pause = settings.think_ms / 1000
    try:
        for index in choices:
            yield writer.delta({"role": "assistant", "content": ""}, index=index)
        if shape.tool_call is not None:
            for part in tool_call_deltas(shape.tool_call):
                yield writer.delta({"tool_calls": [part]})
            reply = replace(reply, pieces=(), reasoning_pieces=(), thinking_pieces=0,
                            finish_reason="tool_calls")
        for piece in reply.reasoning_pieces:
            await asyncio.sleep(think_pause)
            for choice in choices:
                yield writer.delta({"reasoning_content": piece}, index=choice)
        for index, piece in enumerate(reply.pieces):
            if index == reply.abort_after:
                outcome = "aborted"
                raise StreamAborted(reply.scenario)
            if index == reply.cut_after:
                outcome = "aborted"
                return
            if index == reply.bad_chunk_after:
                yield writer.malformed_delta()
            first_pause = settings.slow_first_s if index == 0 and reply.slow_first else 0.0
            pace = think_pause if index < reply.thinking_pieces else settings.delay_ms / 1000
            await asyncio.sleep(first_pause + pace)
            sent.append(piece)
            for choice in choices:
                yield writer.delta({"content": piece}, index=choice)
        for choice in choices:
            yield writer.delta({}, reply.finish_reason, index=choice)
        if reply.send_usage:  # always, asked or not: only `[no-usage]` leaves it out
            yield writer.usage(prompt, *_completion_tokens(reply, "".join(sent), len(sent),
                                                          shape.n))
        yield b"data: [DONE]\n\n"
        outcome = "completed"
    finally:
        recorder.stream_ended(outcome)
        log.info("demo_stream_end", scenario=reply.scenario, outcome=outcome, pieces=len(sent))


def _completion_tokens(reply: Reply, text: str, pieces: int, n: int) -> tuple[int, int | None]:
    """The completion tokens of what was sent (`pieces` content pieces making `text`, and
    the reasoning field's), and of those the thinking's when the model thought: per choice,
    times the `n` choices."""
    completion = count_tokens(reply.reasoning + text) * n
    if not reply.thinks:
        return completion, None
    return completion, count_tokens(reply.thinking_sent(pieces)) * n


def request_shape(body: dict[str, Any], messages: list[dict[str, Any]]) -> Shape:
    n = body.get("n")
    count = n if isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= MAX_N else 1
    return Shape(count, planned_tool_call(messages, body.get("tools")))


async def chat_completions(request: Request) -> Response:
    """POST /v1/chat/completions, streaming or not."""
    state: DemoState = request.app.state.demo
    try:
        body = await request.json()
    except ValueError:
        return error_response(400, "Body is not JSON.", "invalid_json", "invalid_request_error")
    messages = body.get("messages") if isinstance(body, dict) else None
    if not isinstance(messages, list) or not messages or not all(
        isinstance(m, dict) for m in messages
    ):
        return error_response(400, "`messages` must be a non-empty list of objects.",
                              "invalid_messages", "invalid_request_error")
    stream = body.get("stream") is True
    chat = chat_input(messages)
    reply = plan_reply(chat) if stream else plan_completion(chat)
    said = continued_from(messages) if stream else None
    if said is not None:
        reply = continue_reply(reply, said)
    elif stream and state.settings.abort_after is not None:
        reply = replace(reply, abort_after=state.settings.abort_after)
    reply = apply_max_tokens(reply, _max_tokens(body))
    state.recorder.record(body, reply.scenario, stream)
    log.info("demo_request", scenario=reply.scenario, stream=stream, pieces=len(reply.pieces))
    if state.settings.fail_status is not None:
        retry = state.settings.retry_after_s
        failed = error_response(state.settings.fail_status, "The demo server is failing.",
                                "demo_failing", "server_error")
        if retry is not None:
            failed.headers["Retry-After"] = f"{retry:g}"
        return failed
    if reply.http_error is not None:
        return error_response(reply.http_error, reply.error_message, "demo_" + reply.scenario,
                              "server_error")
    model = str(body.get("model") or state.settings.model)
    shape = request_shape(body, messages)
    if not stream:
        return await _completion(reply, model, prompt_tokens(messages), state.settings, shape)
    options = body.get("stream_options")
    include_usage = isinstance(options, dict) and options.get("include_usage") is True
    frames = stream_frames(reply, ChunkWriter(model, include_usage), state.settings,
                           state.recorder, prompt_tokens(messages), shape)
    return AbortableStreamingResponse(
        frames, media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


def _max_tokens(body: dict[str, Any]) -> int | None:
    for key in ("max_completion_tokens", "max_tokens"):
        value = body.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


async def _completion(reply: Reply, model: str, prompt: int, settings: DemoSettings,
                      shape: Shape = Shape()) -> Response:
    if reply.slow_first:
        await asyncio.sleep(settings.slow_first_s)
    text: str | None = reply.text
    message: dict[str, Any] = {"role": "assistant", "content": text, "refusal": None}
    if reply.reasoning_pieces:
        message["reasoning_content"] = reply.reasoning
    finish = reply.finish_reason
    tokens = _completion_tokens(reply, reply.text, len(reply.pieces), shape.n)
    if shape.tool_call is not None:
        text, finish = None, "tool_calls"
        message.update(content=None, tool_calls=[shape.tool_call])
        message.pop("reasoning_content", None)
        tokens = (0, None)
    return JSONResponse({
        "id": f"chatcmpl-demo{uuid.uuid4().hex[:20]}", "object": "chat.completion",
        "created": int(time.time()), "model": model, "system_fingerprint": None,
        "choices": [{"index": index, "message": message, "logprobs": None,
                     "finish_reason": finish} for index in range(shape.n)],
        "usage": usage_dict(prompt, *tokens),
    })


async def list_models(request: Request) -> JSONResponse:
    """GET /v1/models."""
    state: DemoState = request.app.state.demo
    model = {"id": state.settings.model, "object": "model", "created": 0, "owned_by": "chatgate"}
    return JSONResponse({"object": "list", "data": [model]})


async def debug_requests(request: Request) -> JSONResponse:
    """GET /v1/_debug/requests?limit=N: the last N request bodies, oldest first."""
    state: DemoState = request.app.state.demo
    try:
        limit = int(request.query_params.get("limit", "20"))
    except ValueError:
        return error_response(400, "`limit` must be an integer.", "invalid_limit",
                              "invalid_request_error")
    return JSONResponse({"requests": state.recorder.recent(limit)})


async def debug_stats(request: Request) -> JSONResponse:
    """GET /v1/_debug/stats: request and stream outcome counters."""
    state: DemoState = request.app.state.demo
    return JSONResponse(state.recorder.stats())


async def debug_reset(request: Request) -> Response:
    """POST /v1/_debug/reset: forget recorded requests and counters."""
    state: DemoState = request.app.state.demo
    state.recorder.reset()
    return Response(status_code=204)


async def healthz(_: Request) -> JSONResponse:
    """Process is up."""
    return JSONResponse({"status": "ok"})


class DemoState:
    """Per-app settings and recorder (kept on app.state.demo)."""

    def __init__(self, settings: DemoSettings) -> None:
        self.settings = settings
        self.recorder = Recorder(limit=settings.record_limit)


def create_demo_app(settings: DemoSettings | None = None) -> Starlette:
    """The demo model server as a Starlette app."""
    app = Starlette(routes=[
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        Route("/v1/models", list_models, methods=["GET"]),
        Route("/v1/_debug/requests", debug_requests, methods=["GET"]),
        Route("/v1/_debug/stats", debug_stats, methods=["GET"]),
        Route("/v1/_debug/reset", debug_reset, methods=["POST"]),
        Route("/healthz", healthz, methods=["GET"]),
    ])
    app.state.demo = DemoState(settings or DemoSettings())
    return app
