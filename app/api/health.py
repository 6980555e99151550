"""Liveness and readiness."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse

from app.api.state import runtime
from app.logging import get_logger
from app.store.migrations import is_at_head

log = get_logger("api.health")


async def healthz(_: Request) -> JSONResponse:
    """The process is up; says nothing about the database (that is /readyz)."""
    return JSONResponse({"status": "ok"})


async def readyz(request: Request) -> JSONResponse:
    """The database answers and is migrated to head: 200, else 503 with the reason."""
    try:
        migrated = await is_at_head(runtime(request).db)
    except Exception as exc:
        log.warning("readyz_database_unreachable", error=type(exc).__name__)
        return _not_ready("database_unreachable", "the database cannot be reached")
    if not migrated:
        return _not_ready("database_not_migrated", "the database is not migrated to head")
    return JSONResponse({"status": "ready"})


def _not_ready(code: str, message: str) -> JSONResponse:
    return JSONResponse({"status": "not_ready", "error": {"code": code, "message": message}},
                        status_code=503)
