"""PATCH /api/threads/{id} {"autonomy": {"enabled"?, "idle_seconds"?, "max_followups"?}}
-> 200 {id, title, autonomy: <effective settings>}; 422 for anything else in the body."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse

from app.api import bodies
from app.api.auth import authenticate
from app.api.errors import ApiError, not_found
from app.api.state import runtime
from app.followups.autonomy import InvalidAutonomy, validate_patch
from app.followups.thread_settings import default_autonomy, update_autonomy


async def patch_thread(request: Request) -> JSONResponse:
    principal = await authenticate(request)
    thread_id = bodies.thread_id(request)
    rt = runtime(request)
    body = await bodies.json_object(request)
    unknown = sorted(set(body) - {"autonomy"})
    if unknown:
        raise ApiError(422, "invalid_field", f"unknown field(s): {', '.join(unknown)}")
    if "autonomy" not in body:
        raise ApiError(422, "invalid_autonomy", "'autonomy' is required")
    try:
        patch = validate_patch(body["autonomy"])
    except InvalidAutonomy as exc:
        raise ApiError(422, "invalid_autonomy", str(exc)) from exc
    updated = await update_autonomy(rt.db, principal.user_id, thread_id, patch,
                                    default_autonomy(rt.settings))
    if updated is None:
        raise not_found()
    return JSONResponse(updated)
