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
    """The database answers and is migrated to head: 200, else 503 with the reason. Each
    model server's state goes with either answer (`healthy`, `cooling_down` until when, or
    `unreachable` when it does not answer at all; with this process's requests and
    failures): neither is a reason to take the process out of rotation, another process
    reaches the same servers, and its models fall back to the others."""
    rt = runtime(request)
    reason = await not_ready_reason(rt.db)
    servers = await rt.turn_deps.models.checked_state()
    if reason is None:
        return JSONResponse({"status": "ready", "model_servers": servers})
    return JSONResponse(
        {"status": "not_ready", "error": {"code": reason, "message": MESSAGES[reason]},
         "model_servers": servers}, status_code=503)
