"""JSON errors, always `{"error": {"code", "message"}}`, and the handlers that make sure no
bad input and no bug ever answers with anything else."""

from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from app.logging import get_logger

log = get_logger("api.errors")


class ApiError(Exception):
    """A request the gateway refuses, with its HTTP status and a stable machine code."""

    def __init__(self, status: int, code: str, message: str,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers or {}


def error_response(status: int, code: str, message: str,
                   headers: dict[str, str] | None = None) -> JSONResponse:
    headers = dict(headers or {})
    if status == 401:
        headers["WWW-Authenticate"] = "Bearer"
    return JSONResponse({"error": {"code": code, "message": message}}, status,
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


async def unhandled_error_handler(request: Request, exc: Exception) -> Response:
    """A real bug: logged with its traceback, answered as a JSON 500 without internals."""
    log.exception("unhandled_error", path=request.url.path, error=type(exc).__name__)
    return error_response(500, "internal_error", "internal error; see the server log")
