"""`POST /v1/responses`, `GET /v1/responses/{id}`: the OpenAI Responses API over the same
completion service, turn loop and marker filter as `/v1/chat/completions`, with the same
keys, limits and error shape (app.turn.openai.errors)."""

from __future__ import annotations

import functools
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from app.api import bodies
from app.api.auth import authenticate
from app.api.sse import json_bytes
from app.api.state import runtime
from app.turn.completion import CompletionCall
from app.turn.openai.answering import Endings, answered
from app.turn.openai.errors import (
    OpenAIError,
    openai_errors,
    refusal,
)
from app.turn.openai.responses_render import (
    EventWriter,
    Outcome,
    closed_outcome,
    response_object,
    stored_outcome,
)
from app.turn.openai.responses_request import (
    ResponsesRequest,
    parse_responses_body,
    previous_not_found,
    response_message_id,
)
from app.turn.responses import (
    PreviousResponseNotFound,
    open_response,
    response_id,
    stored_answer,
)
from app.turns.choices import ChoiceDelta


@openai_errors
async def create_response(request: Request) -> Response:
    principal = await authenticate(request)
    rt = runtime(request)
    parsed = parse_responses_body(await bodies.json_object(request))
    try:
        call = await open_response(rt.gate, principal, parsed.completion(),
                                   store=parsed.store, previous=parsed.previous_response)
    except PreviousResponseNotFound:
        raise previous_not_found(str(parsed.previous_response_id)) from None
    except Exception as exc:
        if (error := refusal(exc)) is not None and error.code == "thread_busy":
            error.param = "previous_response_id"  # the thread was named by the response
            raise error from None
        raise
    outcome = _outcome(call, parsed)
    frames = _events(call, EventWriter(outcome)) if parsed.stream else None
    return await answered(request, principal, call, ENDINGS, frames=frames,
                          whole=functools.partial(_whole, call, outcome))


@openai_errors
async def get_response(request: Request) -> Response:
    principal = await authenticate(request)
    rt = runtime(request)
    raw = str(request.path_params["response_id"])
    message_id = response_message_id(raw)
    answer = (None if message_id is None else
              await stored_answer(rt.turn_deps.db, principal.user_id, message_id))
    if answer is None:
        raise OpenAIError(404, f"Response with id '{raw}' not found.", "not_found",
                          "response_id")
    return JSONResponse(response_object(stored_outcome(answer)))


def _outcome(call: CompletionCall, parsed: ResponsesRequest) -> Outcome:
    """The response as it starts: its id is its stored message's, or a fresh one."""
    message_id = call.closing.message_id
    rid = response_id(message_id) if message_id is not None else "resp_" + call.id[-32:]
    echo: dict[str, Any] = {**parsed.echo, "store": parsed.store,
                            "previous_response_id": parsed.previous_response_id}
    return Outcome(id=rid, created_at=call.created, model=call.request.model, echo=echo)


def _whole(call: CompletionCall, outcome: Outcome, deltas: list[ChoiceDelta]
           ) -> dict[str, Any]:
    """The response object of a whole (non-streamed) call."""
    text, finish = _text_and_finish(deltas)
    first = call.choices.choices[0]
    closed_outcome(outcome, call.closing, text, first.tool_calls, finish,
                   first.answer.reasoning)
    return response_object(outcome)


def _text_and_finish(deltas: list[ChoiceDelta]) -> tuple[str, str | None]:
    text = "".join(delta.text for delta in deltas if delta.index == 0)
    finish = next((d.finish_reason for d in reversed(deltas) if d.finish_reason), None)
    return text, finish


def _frame(event: dict[str, Any]) -> bytes:
    kind = str(event["type"]).encode()
    return b"event: " + kind + b"\ndata: " + json_bytes(event) + b"\n\n"


def _error_frame(error: OpenAIError) -> bytes:
    """A stream cut by the gateway (a revoked key, a shutdown): an `error` event that also
    carries OpenAI's `error` object, which the SDKs raise."""
    inner = error.body()["error"]
    assert isinstance(inner, dict)
    return _frame({"type": "error", "code": inner["code"], "message": inner["message"],
                   "param": None, "error": inner})


ENDINGS = Endings.of(_error_frame)


async def _events(call: CompletionCall, writer: EventWriter) -> AsyncGenerator[bytes, None]:
    for event in writer.opening():
        yield _frame(event)
    text: list[str] = []
    finish: str | None = None
    async with aclosing(call.deltas()) as deltas:
        async for delta in deltas:
            if delta.index != 0:
                continue
            text.append(delta.text)
            finish = delta.finish_reason or finish
            for event in writer.delta(delta):
                yield _frame(event)
    first = call.choices.choices[0]
    outcome = closed_outcome(writer.outcome, call.closing, "".join(text), first.tool_calls,
                             finish, first.answer.reasoning)
    for event in writer.closing(outcome):
        yield _frame(event)


