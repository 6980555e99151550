"""`POST /v1/chat/completions`, `GET /v1/models`: parse, call the completion service,
render in OpenAI's format."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import Receive, Scope, Send

from app.api import bodies
from app.api.auth import authenticate
from app.api.event_stream import (
    FrameResponse,
    RevocationGuard,
    RevokedEnding,
    ShutdownWatch,
)
from app.api.sse import json_bytes
from app.api.state import runtime
from app.clock import utcnow
from app.kit.shield import run_shielded
from app.turn.completion import CompletionCall, open_completion
from app.turn.openai.errors import (
    OpenAIError,
    failure_error,
    key_revoked,
    openai_errors,
)
from app.turn.openai.render import ChunkWriter, model, models_list, whole_reply
from app.turn.openai.request import parse_body, thread_id
from app.turns.choices import ChoiceDelta
from app.turns.interruptions import KEY_REVOKED, SHUTTING_DOWN

DONE = b"data: [DONE]\n\n"
#: `created` of the listed models: when this process started offering them.
MODELS_CREATED = int(utcnow().timestamp())


@openai_errors
async def chat_completions(request: Request) -> Response:
    principal = await authenticate(request)
    rt = runtime(request)
    parsed = parse_body(await bodies.json_object(request))
    call = await open_completion(rt.gate, principal, parsed.completion, thread_id(request))
    revocation = functools.partial(rt.revocations.stream, principal.key_id)
    if parsed.stream:
        writer = ChunkWriter(call, include_usage=parsed.include_usage)
        return CallStreamResponse(
            call, _frames(call, writer), ping_s=rt.settings.keepalive_s,
            send_timeout_s=rt.settings.sse_send_timeout_s, revoked_ending=REVOKED,
            shutdown_ending=SHUTTING_DOWN_ENDING, revocation=revocation,
            shutdown=rt.shutdown.watch)
    deltas = await run_whole(call, revocation, rt.shutdown.watch)
    if call.closing.failure is not None:
        raise failure_error(call.closing.failure)
    return JSONResponse(whole_reply(call, deltas))


@openai_errors
async def list_models(request: Request) -> Response:
    """GET /v1/models: the models this key may use (a key limited to some lists those)."""
    principal = await authenticate(request)
    catalog = runtime(request).turn_deps.models.catalog
    return JSONResponse(models_list(catalog.usable(principal.allowed_models), MODELS_CREATED))


@openai_errors
async def get_model(request: Request) -> Response:
    """GET /v1/models/{id}: a model this key may not use is not there for it, as an unknown
    one is not (404 `model_not_found`): a limited key learns nothing of the others."""
    principal = await authenticate(request)
    catalog = runtime(request).turn_deps.models.catalog
    name = str(request.path_params["model"])
    if name not in catalog.usable(principal.allowed_models):
        raise OpenAIError(404, f"The model '{name}' does not exist", "model_not_found",
                          "model")
    return JSONResponse(model(name, MODELS_CREATED))


@openai_errors
async def unknown_route(request: Request) -> Response:
    raise OpenAIError(404, f"Unknown request URL: {request.method} {request.url.path}",
                      "unknown_url")


def _data(chunk: Any) -> bytes:
    """One `data:` frame of OpenAI's stream (no `event:` line: the SDKs read `data` alone)."""
    return b"data: " + json_bytes(chunk) + b"\n\n"


#: A stream whose key is revoked ends as a failed one does, with OpenAI's `{"error": ...}`
#: (the SDKs raise it; a native `key_revoked` event they would take for the answer's end).
REVOKED = RevokedEnding(_data(key_revoked().body()), lambda: key_revoked().response())
#: A stream cut because the process is shutting down ends as a failed one does, so that the
#: SDKs raise rather than take the cut answer for a whole one; the call is stored
#: `interrupted` with what was sent.
SHUTTING_DOWN_ENDING = _data(OpenAIError(
    503, "the gateway is shutting down; send the request again", "shutting_down").body())



async def run_whole(call: CompletionCall, revocation: RevocationGuard,
                    shutdown: ShutdownWatch) -> list[ChoiceDelta]:
    """Every delta of a non-streamed call; a 401 `key_revoked` once its key is revoked while
    it runs, as a stream ends then, and a 503 `shutting_down` at once when the process
    begins shutting down (a whole reply may take minutes: the server's grace would cut it
    with a bare 500). Cut or not, the call is finished (stored `interrupted` with its
    reason, and billed for what the model produced) before this returns."""
    running = asyncio.ensure_future(call.run_to_end())
    stopped_by: OpenAIError | None = None

    def stop(reason: str, error: OpenAIError) -> None:
        nonlocal stopped_by
        stopped_by = error
        call.stopping(reason)
        running.cancel()

    with (revocation(lambda: stop(KEY_REVOKED, key_revoked())),
          shutdown(lambda: stop(SHUTTING_DOWN, shutting_down()))):
        try:
            return await running
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if stopped_by is not None and (current is None or not current.cancelling()):
                raise stopped_by from None
            raise


def shutting_down() -> OpenAIError:
    """What a call the shutdown cut answers: the SDKs raise it, and retry it elsewhere."""
    return OpenAIError(503, "the gateway is shutting down; send the request again",
                       "shutting_down")


async def _frames(call: CompletionCall, writer: ChunkWriter) -> AsyncGenerator[bytes, None]:
    for chunk in writer.opening():
        yield _data(chunk)
    finishes: list[ChoiceDelta] = []
    async with aclosing(call.deltas()) as deltas:
        async for delta in deltas:
            if delta.finish_reason:
                finishes.append(delta)
            else:
                yield _data(writer.delta(delta))
    if call.closing.failure is not None:  # the SDKs raise on an `error` event
        yield _data(failure_error(call.closing.failure).body())
        return
    for chunk in writer.closing(finishes):
        yield _data(chunk)
    yield DONE


class CallStreamResponse(FrameResponse):
    """A call's frames as an event stream that always finishes the call, even if the client
    left before the first byte (when the frames never started, closing them runs nothing).
    Chat completions and the Responses API stream through it, each with its own frames and
    endings."""

    def __init__(self, call: CompletionCall, frames: AsyncGenerator[bytes, None], *,
                 ping_s: float, send_timeout_s: float, revoked_ending: RevokedEnding,
                 shutdown_ending: bytes, revocation: RevocationGuard | None = None,
                 shutdown: ShutdownWatch | None = None) -> None:
        super().__init__(frames, ping_s=ping_s, send_timeout_s=send_timeout_s,
                         log_ids=call.log_ids, revocation=revocation,
                         revoked_ending=revoked_ending, shutdown=shutdown,
                         shutdown_ending=shutdown_ending, on_stop=call.stopping)
        self._call = call

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await run_shielded(self._call.finish())
