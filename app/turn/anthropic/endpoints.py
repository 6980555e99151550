"""`POST /v1/messages`, `POST /v1/messages/count_tokens`: the Anthropic Messages API. Parse
(app.turn.anthropic.request), open the call `/v1/chat/completions` opens (so the same keys,
limits, escaping, marker filter, storing and billing), render Anthropic's events or message.

The key comes as `x-api-key` (the anthropic SDKs' header) or `Authorization: Bearer`; an
`anthropic-version` header is accepted and changes nothing. `X-Chatgate-Thread-Id` stores the
exchange in a thread, as on chat completions."""

from __future__ import annotations

import functools
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from app.api import bodies
from app.api.auth import authenticate
from app.api.event_stream import RevokedEnding
from app.api.sse import json_bytes
from app.api.state import runtime
from app.turn.anthropic.errors import (
    AnthropicError,
    anthropic_errors,
    database_unreachable,
    failed,
    key_revoked,
    shutting_down,
)
from app.turn.anthropic.render import EventWriter, whole_message
from app.turn.anthropic.request import count_request, parse_messages_body, thread_id
from app.turn.anthropic.tokens import count_input_tokens, estimate_input_tokens
from app.turn.openai.answering import Endings, answered
from app.turn.openai.errors import THREAD_HEADER
from app.turn.run.completion import CompletionCall, open_completion


@anthropic_errors
async def create_message(request: Request) -> Response:
    principal = await authenticate(request, x_api_key=True)
    rt = runtime(request)
    parsed = parse_messages_body(await bodies.json_object(request))
    thread = thread_id(request.headers.get(THREAD_HEADER), THREAD_HEADER)
    call = await open_completion(rt.gate, principal, parsed.completion, thread)
    frames = (_events(call, EventWriter(call, estimate_input_tokens(rt.settings,
                                                                    parsed.completion)))
              if parsed.stream else None)
    return await answered(request, principal, call, ENDINGS, frames=frames,
                          whole=functools.partial(whole_message, call), failure=failed)


@anthropic_errors
async def count_tokens(request: Request) -> Response:
    """The request's input tokens, estimated (app.turn.anthropic.tokens): nothing is sent
    to a model server, stored or billed."""
    principal = await authenticate(request, x_api_key=True)
    rt = runtime(request)
    parsed = count_request(await bodies.json_object(request))
    return JSONResponse({"input_tokens": count_input_tokens(rt.turn_deps, principal, parsed)})


def _frame(event: dict[str, Any]) -> bytes:
    kind = str(event["type"]).encode()
    return b"event: " + kind + b"\ndata: " + json_bytes(event) + b"\n\n"


def _error_frame(error: AnthropicError) -> bytes:
    """A stream that fails, or that the gateway cuts: Anthropic's `error` event, which the
    SDKs raise."""
    return _frame(error.body())


ENDINGS = Endings(RevokedEnding(_error_frame(key_revoked()), lambda: key_revoked().response()),
                  _error_frame(shutting_down()), _error_frame(database_unreachable()))


async def _events(call: CompletionCall, writer: EventWriter) -> AsyncGenerator[bytes, None]:
    for event in writer.opening():
        yield _frame(event)
    async with aclosing(call.deltas()) as deltas:
        async for delta in deltas:
            for event in writer.delta(delta):
                yield _frame(event)
    if call.closing.failure is not None:
        yield _error_frame(failed(call.closing.failure))
        return
    for event in writer.closing():
        yield _frame(event)
