"""POST /api/threads/{id}/messages: validate, open the turn through the limits (404, 409, 413,
429, 503 before any stream starts and before any upstream call), then run it and stream
it as SSE. POST .../messages/{id}/continue: the thread's cut last answer finished in place,
streamed the same way, as are .../regenerate (a new answer beside one) and an edit (a new
version of a question); .../show moves the thread's branch to a version. DELETE
/api/threads/{id}/messages/{id}: the last exchange taken back."""

from __future__ import annotations

import functools
import uuid
from collections.abc import Awaitable

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from app.api import bodies
from app.api.auth import authenticate
from app.api.errors import ApiError, not_found
from app.api.state import runtime
from app.config.catalog import ModelNotAllowed, ModelNotOffered, choose
from app.store.errors import ContentTooLong, ThreadBusy
from app.turn import take_back
from app.turn.admission.opening import ThreadNotFound
from app.turn.holds.slots import TurnRefused
from app.turn.native import new_version
from app.turn.native.continuing import MessageNotFound, NotContinuable, admit_continuation
from app.turn.native.log_stream import LogStreamResponse
from app.turn.native.new_version import NoNewVersion, admit_edit, admit_regeneration
from app.turn.native.turn import Turn, admit_turn


async def list_models(request: Request) -> Response:
    """GET /api/models: the models this key may pick, and the one a new thread uses."""
    principal = await authenticate(request)
    catalog = runtime(request).turn_deps.models.catalog
    allowed = principal.allowed_models
    try:
        default = choose(catalog, None, None, allowed)
    except ModelNotAllowed:
        default = catalog.default
    return JSONResponse({"models": [{"name": name} for name in catalog.usable(allowed)],
                         "default": default})


async def post_message(request: Request) -> Response:
    """POST /api/threads/{thread_id}/messages: a new question and its answer; with
    `edit_of`, a new version of that question of the user's (Edit)."""
    principal = await authenticate(request)
    thread_id = bodies.thread_id(request)
    rt = runtime(request)
    body = await bodies.json_object(request)
    content = bodies.message_content(body, rt.settings.max_content_chars)
    model = _model(body)
    edit_of = body.get("edit_of")
    if edit_of is None:
        opening = admit_turn(rt.gate, principal, thread_id, content, model)
    else:
        opening = admit_edit(rt.gate, principal, thread_id, content, model,
                             bodies.message_ref(body, "edit_of"))
    return _streamed(request, principal.key_id, await _opened(opening))


async def regenerate_answer(request: Request) -> Response:
    """POST /api/threads/{thread_id}/messages/{message_id}/regenerate: a new answer to the
    question this answer replies to, a version beside it (the old one stays), streamed as a
    turn is. 409 for a user message or an answer still streaming."""
    principal = await authenticate(request)
    thread_id, message_id = bodies.thread_id(request), bodies.message_id(request)
    body = await bodies.json_object(request, optional=True)
    rt = runtime(request)
    turn = await _opened(admit_regeneration(rt.gate, principal, thread_id, message_id,
                                            _model(body)))
    return _streamed(request, principal.key_id, turn)


async def continue_answer(request: Request) -> Response:
    """POST /api/threads/{thread_id}/messages/{message_id}/continue: the thread's last answer,
    interrupted or cut at its token limit, finished in place (no new question); the
    continuation streams as a turn does. 409 for any other answer, 404 for a message that is
    not in the user's thread."""
    principal = await authenticate(request)
    thread_id, message_id = bodies.thread_id(request), bodies.message_id(request)
    rt = runtime(request)
    turn = await _opened(admit_continuation(rt.gate, principal, thread_id, message_id))
    return _streamed(request, principal.key_id, turn)


async def show_version(request: Request) -> Response:
    """POST /api/threads/{thread_id}/messages/{message_id}/show: the thread's branch moved
    to this version (and what was written last under it); the thread's messages as they now
    show. 409 while an answer streams."""
    principal = await authenticate(request)
    thread_id, message_id = bodies.thread_id(request), bodies.message_id(request)
    try:
        shown = await new_version.show_version(runtime(request).db, principal.user_id,
                                               thread_id, message_id)
    except ThreadNotFound as exc:
        raise not_found() from exc
    except MessageNotFound as exc:
        raise not_found("message") from exc
    except ThreadBusy as exc:
        raise ApiError(409, "thread_busy", "this thread is still streaming an answer") from exc
    return JSONResponse({"messages": shown})


def _model(body: dict[str, object]) -> str | None:
    model = body.get("model")
    if model is not None and (not isinstance(model, str) or not model):
        raise ApiError(400, "invalid_model", "'model' must be the name of a model")
    return model


async def _opened(opening: Awaitable[Turn]) -> Turn:
    """The turn, or its refusal as the API's error, before any stream starts."""
    try:
        return await opening
    except ModelNotOffered as exc:
        raise ApiError(404, "model_not_found", exc.sentence()) from exc
    except ModelNotAllowed as exc:
        raise ApiError(403, "model_not_allowed",
                       f"this key may not use the model '{exc}'") from exc
    except TurnRefused as exc:
        raise ApiError(exc.status, exc.code, exc.message,
                       {"Retry-After": str(exc.retry_after_s)}) from exc
    except ThreadNotFound as exc:
        raise not_found() from exc
    except MessageNotFound as exc:
        raise not_found("message") from exc
    except (NotContinuable, NoNewVersion) as exc:
        raise ApiError(409, exc.code, exc.message) from exc
    except ThreadBusy as exc:
        raise ApiError(409, "thread_busy", "this thread is already streaming an answer") from exc
    except ContentTooLong as exc:
        raise ApiError(413, "content_too_long", str(exc)) from exc


def _streamed(request: Request, key_id: uuid.UUID | None, turn: Turn) -> Response:
    """The turn run in a task of its own (it outlives this connection for the resume
    grace); this response is its first reader."""
    rt = runtime(request)
    return LogStreamResponse(
        rt.runs.start(turn), ping_s=rt.settings.keepalive_s,
        send_timeout_s=rt.settings.sse_send_timeout_s, log_ids=turn.log_ids,
        revocation=functools.partial(rt.revocations.stream, key_id),
        shutdown=rt.shutdown.watch)


async def take_back_last_exchange(request: Request) -> Response:
    """DELETE /api/threads/{thread_id}/messages/{message_id}: the thread's last user message
    and its answer go (204), for an edited text to be sent in their place; 409 for an
    earlier message or while an answer streams, 404 for a message that is not the user's."""
    principal = await authenticate(request)
    thread_id, message_id = bodies.thread_id(request), bodies.message_id(request)
    try:
        removed = await take_back.take_back_last_exchange(
            runtime(request).db, principal.user_id, thread_id, message_id)
    except take_back.ExchangeRefused as exc:
        raise ApiError(409, exc.code, exc.message) from exc
    if removed is None:
        raise not_found("message")
    return Response(status_code=204)
