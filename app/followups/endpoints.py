"""PATCH /api/threads/{id} {"title"?: str, "autonomy"?: {"enabled"?, "idle_seconds"?,
"max_followups"?}} -> 200 {id, title, autonomy: <effective settings>}; at least one field,
422 for anything else in the body. Both changes are applied together or not at all."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse

from app.api import bodies
from app.api.auth import authenticate
from app.api.errors import ApiError, not_found
from app.api.state import runtime
from app.followups.autonomy import InvalidAutonomy, validate_patch
from app.followups.thread_settings import default_autonomy, update_thread

FIELDS = {"title", "autonomy"}


async def patch_thread(request: Request) -> JSONResponse:
    principal = await authenticate(request)
    thread_id = bodies.thread_id(request)
    rt = runtime(request)
    body = await bodies.json_object(request)
    unknown = sorted(set(body) - FIELDS)
    if unknown:
        raise ApiError(422, "invalid_field", f"unknown field(s): {', '.join(unknown)}")
    if not FIELDS & set(body):
        raise ApiError(422, "invalid_field", "nothing to change: send 'title' and/or 'autonomy'")
    title = bodies.required_title(body) if "title" in body else None
    updated = await update_thread(rt.db, principal.user_id, thread_id,
                                  defaults=default_autonomy(rt.settings), title=title,
                                  autonomy=_autonomy_patch(body))
    if updated is None:
        raise not_found()
    return JSONResponse(updated)


def _autonomy_patch(body: dict[str, Any]) -> dict[str, Any] | None:
    if "autonomy" not in body:
        return None
    try:
        return validate_patch(body["autonomy"])
    except InvalidAutonomy as exc:
        raise ApiError(422, "invalid_autonomy", str(exc)) from exc
