"""JSON errors, always `{"error": {"code", "message"}}`, and the handlers that make sure no
bad input and no bug ever answers with anything else."""

from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from app.observe.logging import get_logger
from app.observe.redaction import SECRETS
from app.store.errors import DatabaseUnavailable

log = get_logger("api.errors")


class ApiError(Exception):
    """A request the gateway refuses, with its HTTP status and a stable machine code.
    `param` is the body field at fault, as a path: the `/v1` routes answer it as OpenAI's
    `param`; the native shape names it in the message only."""

    def __init__(self, status: int, code: str, message: str,
                 headers: dict[str, str] | None = None, *, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers or {}
        self.param = param


#: Retry-After of a 503 when the lifespan's settings are not there (start-up, tests).
DEFAULT_RETRY_AFTER_S = 5


def error_response(status: int, code: str, message: str,
                   headers: dict[str, str] | None = None) -> JSONResponse:
    headers = dict(headers or {})
    if status == 401:
        headers["WWW-Authenticate"] = "Bearer"
    # A message may echo what a client sent: no secret goes back out (app.observe.redaction).
    return JSONResponse({"error": {"code": code, "message": SECRETS.text(message)}}, status,
                        headers=headers or None)


def not_found(what: str = "thread") -> ApiError:
    """The one 404 for missing and foreign rows alike: nothing tells them apart."""
    return ApiError(404, "not_found", f"{what} not found")


_HTTP_CODES = {404: "not_found", 405: "method_not_allowed", 400: "bad_request"}


async def api_error_handler(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return error_response(exc.status, exc.code, exc.message, exc.headers)


async def http_exception_handler(_: Request, exc: Exception) -> Response:
    """Starlette's own errors (unknown route, wrong method) in the same JSON shape."""
    assert isinstance(exc, HTTPException)
    code = _HTTP_CODES.get(exc.status_code, "http_error")
    return error_response(exc.status_code, code, str(exc.detail))


async def database_unavailable_handler(request: Request, exc: Exception) -> Response:
    """The database is down or unreachable: not a bug, so one warning line without a
    traceback, and a normal JSON 503 with Retry-After (the keep-alive connection stays
    open; the next request after the database is back simply works)."""
    assert isinstance(exc, DatabaseUnavailable)
    return error_response(503, "database_unavailable", DATABASE_UNAVAILABLE,
                          {"Retry-After": str(note_database_unavailable(request, exc))})


DATABASE_UNAVAILABLE = "the database is unavailable; retry shortly"


def note_database_unavailable(request: Request, exc: DatabaseUnavailable) -> int:
    """The warning line and the metric of a 503 `database_unavailable`; its Retry-After."""
    runtime = getattr(request.app.state, "runtime", None)
    retry_after = DEFAULT_RETRY_AFTER_S
    if runtime is not None:
        retry_after = runtime.settings.database_retry_after_s
        runtime.metrics.database_unavailable.inc()
    log.warning("database_unavailable", path=request.url.path, error=str(exc))
    return int(retry_after)


async def unhandled_error_handler(request: Request, exc: Exception) -> Response:
    """A real bug: logged with its traceback, answered as a JSON 500 without internals."""
    log.exception("unhandled_error", path=request.url.path, error=type(exc).__name__)
    return error_response(500, "internal_error", "internal error; see the server log")
