"""`POST /v1/chat/completions`, `GET /v1/models`: parse, call the completion service,
render in OpenAI's format."""

from __future__ import annotations

import functools
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from app.answer.choices import ChoiceDelta
from app.api import bodies
from app.api.auth import authenticate
from app.api.sse import json_bytes
from app.api.state import runtime
from app.core.clock import utcnow
from app.turn.openai.answering import Endings, answered
from app.turn.openai.chat_render import ChunkWriter, model, models_list, whole_reply
from app.turn.openai.chat_request import parse_body, thread_id
from app.turn.openai.errors import (
    OpenAIError,
    failure_error,
    openai_errors,
)
from app.turn.run.completion import CompletionCall, open_completion

DONE = b"data: [DONE]\n\n"
#: `created` of the listed models: when this process started offering them.
MODELS_CREATED = int(utcnow().timestamp())


@openai_errors
async def chat_completions(request: Request) -> Response:
    principal = await authenticate(request)
    rt = runtime(request)
    parsed = parse_body(await bodies.json_object(request))
    call = await open_completion(rt.gate, principal, parsed.completion, thread_id(request))
    frames = (_frames(call, ChunkWriter(call, include_usage=parsed.include_usage))
              if parsed.stream else None)
    return await answered(request, principal, call, ENDINGS, frames=frames,
                          whole=functools.partial(whole_reply, call))


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


ENDINGS = Endings.of(lambda error: _data(error.body()))


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
