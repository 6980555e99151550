"""Liveness and readiness."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse

from app.api.state import runtime
from app.process.readiness import NotReady, not_ready_reason

MESSAGES: dict[NotReady, str] = {
    "database_unreachable": "the database cannot be reached",
    "database_not_migrated": "the database is not migrated to head",
}


async def healthz(_: Request) -> JSONResponse:
    """The process is up; says nothing about the database (that is /readyz)."""
    return JSONResponse({"status": "ok"})


async def readyz(request: Request) -> JSONResponse:
    """The database answers and is migrated to head: 200, else 503 with the reason."""
    reason = await not_ready_reason(runtime(request).db)
    if reason is None:
        return JSONResponse({"status": "ready"})
    return JSONResponse(
        {"status": "not_ready", "error": {"code": reason, "message": MESSAGES[reason]}},
        status_code=503)
