"""`POST /v1/responses`, `GET /v1/responses/{id}` (and its `input_items`), `DELETE` and
`cancel`: the OpenAI Responses API over the same completion service, turn loop and marker
filter as `/v1/chat/completions`, with the same keys, limits and error shape
(app.turn.openai.errors)."""

from __future__ import annotations

import functools
import uuid
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from app.answer.choices import ChoiceDelta
from app.api import bodies
from app.api.auth import authenticate
from app.api.sse import json_bytes
from app.api.state import runtime
from app.turn.openai.answering import Endings, answered
from app.turn.openai.errors import (
    OpenAIError,
    openai_errors,
    refusal,
)
from app.turn.openai.responses_items import deleted, input_items_page, page_query
from app.turn.openai.responses_render import (
    EventWriter,
    Outcome,
    closed_outcome,
    response_object,
    stored_outcome,
)
from app.turn.openai.responses_request import (
    ResponsesRequest,
    item_not_found,
    item_references,
    parse_responses_body,
    previous_not_found,
    response_message_id,
)
from app.turn.run.completion import CompletionCall
from app.turn.stored.item_references import ItemNotFound, ResolvedItem, resolve_items
from app.turn.stored.response_store import ResponseBusy, delete_response, response_input
from app.turn.stored.response_threads import (
    PreviousResponseNotFound,
    open_response,
    response_id,
    stored_answer,
)

if TYPE_CHECKING:
    from app.store.db import Database


@openai_errors
async def create_response(request: Request) -> Response:
    principal = await authenticate(request)
    rt = runtime(request)
    body = await bodies.json_object(request)
    parsed = parse_responses_body(body, await _referenced(rt.turn_deps.db, principal.user_id,
                                                          body))
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
    raw, message_id = _response_path(request)
    answer = (None if message_id is None else
              await stored_answer(rt.turn_deps.db, principal.user_id, message_id))
    if answer is None:
        raise _not_found(raw)
    return JSONResponse(response_object(stored_outcome(answer)))


@openai_errors
async def list_input_items(request: Request) -> Response:
    """GET /v1/responses/{id}/input_items: the stored input the response was asked with."""
    principal = await authenticate(request)
    raw, message_id = _response_path(request)
    query = page_query(request.query_params)
    items = (None if message_id is None else
             await response_input(runtime(request).turn_deps.db, principal.user_id, message_id))
    if items is None:
        raise _not_found(raw)
    return JSONResponse(input_items_page(items, query))


@openai_errors
async def remove_response(request: Request) -> Response:
    """DELETE /v1/responses/{id}: the response and its question go (its thread too when
    nothing is left); OpenAI's deleted object."""
    principal = await authenticate(request)
    raw, message_id = _response_path(request)
    try:
        gone = message_id is not None and await delete_response(
            runtime(request).turn_deps.db, principal.user_id, message_id)
    except ResponseBusy:
        raise OpenAIError(409, "the response is still being written; delete it once it "
                               "has finished", "response_in_progress") from None
    if not gone:
        raise _not_found(raw)
    return JSONResponse(deleted(raw))


@openai_errors
async def cancel_response(request: Request) -> Response:
    """POST /v1/responses/{id}/cancel: no response here runs in the background (each is
    answered while its request is open), so a stored one is refused as OpenAI refuses a
    response that was not created with `background: true`."""
    principal = await authenticate(request)
    raw, message_id = _response_path(request)
    answer = (None if message_id is None else await stored_answer(
        runtime(request).turn_deps.db, principal.user_id, message_id))
    if answer is None:
        raise _not_found(raw)
    raise OpenAIError(400, "Cannot cancel a synchronous response.")


def _response_path(request: Request) -> tuple[str, uuid.UUID | None]:
    raw = str(request.path_params["response_id"])
    return raw, response_message_id(raw)


def _not_found(raw: str) -> OpenAIError:
    return OpenAIError(404, f"Response with id '{raw}' not found.", "not_found", "response_id")


async def _referenced(db: Database, user_id: str, body: dict[str, Any]
                      ) -> dict[str, ResolvedItem]:
    """The stored items the body's `item_reference`s name (none read without any)."""
    refs = item_references(body)
    if not refs:
        return {}
    try:
        return await resolve_items(db, user_id, refs)
    except ItemNotFound as exc:
        position = next(i for i, item in enumerate(body["input"]) if isinstance(item, dict)
                        and item.get("type") == "item_reference"
                        and item.get("id") == exc.item_id)
        raise item_not_found(exc.item_id, position) from None


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


