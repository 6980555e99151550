"""GET /api/threads/{thread_id}/messages/{message_id}/stream: resume a turn's event stream
after `Last-Event-ID`; POST .../stop: end the turn now. Parse, call the resume service,
render (docs/api.md: resuming a stream)."""

from __future__ import annotations

import functools

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from app.api import bodies
from app.api.auth import authenticate
from app.api.errors import ApiError
from app.api.state import runtime
from app.turn.native.log_stream import LogStreamResponse
from app.turn.native.resume import ResumeRefused


async def resume_stream(request: Request) -> Response:
    principal = await authenticate(request)
    thread_id, message_id = bodies.thread_id(request), bodies.message_id(request)
    after = bodies.last_event_id(request)
    rt = runtime(request)
    try:
        stream = await rt.resumes.resume(principal.user_id, thread_id, message_id, after)
    except ResumeRefused as exc:
        raise ApiError(exc.status, exc.code, exc.message) from exc
    return LogStreamResponse(
        stream, ping_s=rt.settings.keepalive_s, send_timeout_s=rt.settings.sse_send_timeout_s,
        log_ids={"user_id": principal.user_id, "thread_id": str(thread_id),
                 "message_id": str(message_id)},
        revocation=functools.partial(rt.revocations.stream, principal.key_id),
        shutdown=rt.shutdown.watch)


async def stop_turn(request: Request) -> JSONResponse:
    principal = await authenticate(request)
    thread_id, message_id = bodies.thread_id(request), bodies.message_id(request)
    try:
        outcome = await runtime(request).resumes.stop(principal.user_id, thread_id, message_id)
    except ResumeRefused as exc:
        raise ApiError(exc.status, exc.code, exc.message) from exc
    return JSONResponse({"message_id": str(message_id), "status": outcome.status},
                        status_code=202 if outcome.pending else 200)
