"""Errors in OpenAI's shape, `{"error": {"message", "type", "param", "code"}}`, with OpenAI's
statuses, for every way a `/v1` request can go wrong: the SDKs raise their typed errors from
the status, and show the message."""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from app.answer.events import TurnFailure
from app.api.errors import DATABASE_UNAVAILABLE, ApiError, note_database_unavailable
from app.config.catalog import ModelNotAllowed, ModelNotOffered
from app.observe.logging import get_logger
from app.observe.redaction import SECRETS
from app.store.errors import ContentTooLong, DatabaseUnavailable, ThreadBusy
from app.turn.admission.opening import ThreadNotFound
from app.turn.holds.slots import TurnRefused
from app.turn.run.completion import CompletionFailed, ModelNotFound

log = get_logger("api.openai")

#: The header naming the thread an exchange is stored in.
THREAD_HEADER = "X-Chatgate-Thread-Id"

_TYPES = {400: "invalid_request_error", 401: "invalid_request_error", 403: "permission_error",
          404: "invalid_request_error", 409: "invalid_request_error",
          413: "invalid_request_error", 415: "invalid_request_error",
          422: "invalid_request_error", 429: "rate_limit_error"}
#: The gateway's own 4xx codes that OpenAI spells otherwise.
_CODES = {"unauthorized": "invalid_api_key", "budget_exceeded": "insufficient_quota"}
#: Upstream statuses a client can act on are passed on; the rest is the gateway's 502.
_PASSED_UPSTREAM_STATUSES = {400, 404, 413, 422, 429}


class OpenAIError(Exception):
    """A refusal in OpenAI's terms."""

    def __init__(self, status: int, message: str, code: str | None = None,
                 param: str | None = None, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.code, self.param = status, message, code, param
        self.headers = headers or {}

    def body(self) -> dict[str, object]:
        kind = _TYPES.get(self.status, "server_error" if self.status >= 500 else
                          "invalid_request_error")
        # Messages may echo what a client or a model server sent: no secret goes back out.
        return {"error": {"message": SECRETS.text(self.message), "type": kind,
                          "param": self.param, "code": self.code}}

    def response(self) -> Response:
        headers = dict(self.headers)
        if self.status == 401:
            headers["WWW-Authenticate"] = "Bearer"
        return JSONResponse(self.body(), self.status, headers=headers or None)


def shutting_down() -> OpenAIError:
    """What a call the shutdown cut answers: the SDKs raise it, and retry it elsewhere."""
    return OpenAIError(503, "the gateway is shutting down; send the request again",
                       "shutting_down")


def database_unreachable() -> OpenAIError:
    """What a call ends with when this process lost its database mid-answer (it ends its
    answers before another process may take their threads over): send it again."""
    return OpenAIError(503, "the gateway lost its database; send the request again",
                       "database_unreachable")


def key_revoked() -> OpenAIError:
    """A call cut because its key was revoked while it ran: its 401, or the last event of
    its stream (which the SDKs raise as an APIError)."""
    return OpenAIError(401, "the API key was revoked", "key_revoked")


def invalid(message: str, param: str | None = None) -> OpenAIError:
    return OpenAIError(400, message, "invalid_request_error", param)


def failure_error(failure: TurnFailure) -> OpenAIError:
    """A failed call's status: the model server's own when the client can act on it (its
    429 with its Retry-After, a 400 for a tool schema it refused), 504 when it was too
    slow (its first token late, or its whole answer past `max_answer_s`), else 502."""
    if failure.code == "internal_error":
        return OpenAIError(500, failure.message, failure.code)
    if failure.code in ("upstream_timeout", "answer_too_long"):
        return OpenAIError(504, failure.message, failure.code)
    status = failure.http_status
    if status in _PASSED_UPSTREAM_STATUSES:
        return OpenAIError(status, failure.message, failure.code,
                           headers=_retry_after(failure.retry_after_s))
    return OpenAIError(502, failure.message, failure.code)


def _retry_after(seconds: float | None) -> dict[str, str]:
    """The model server's Retry-After, passed on in whole seconds (at least 1): the SDKs
    wait what it says before their own retry."""
    if seconds is None or not math.isfinite(seconds) or seconds < 0:
        return {}
    return {"Retry-After": str(max(1, math.ceil(seconds)))}


def refusal(exc: Exception) -> OpenAIError | None:
    """The OpenAI error for a refusal the completion service raised, or None."""
    match exc:
        case OpenAIError():
            return exc
        case ApiError():
            return OpenAIError(exc.status, exc.message, _CODES.get(exc.code, exc.code),
                               exc.param, headers=exc.headers)
        case ModelNotFound():
            cause = exc.__cause__  # the catalog's refusal, with the models the key may pick
            message = (cause.sentence("The model '{name}' does not exist")
                       if isinstance(cause, ModelNotOffered) else
                       f"The model '{exc}' does not exist")
            return OpenAIError(404, message, "model_not_found", "model")
        case ModelNotAllowed():
            return OpenAIError(403, f"This key may not use the model '{exc}'",
                               "model_not_allowed", "model")
        case TurnRefused():
            return OpenAIError(exc.status, exc.message, _CODES.get(exc.code, exc.code),
                               headers={"Retry-After": str(max(1, round(exc.retry_after_s)))})
        case ThreadNotFound():
            return OpenAIError(404, "thread not found", "thread_not_found", THREAD_HEADER)
        case ThreadBusy():
            return OpenAIError(409, "this thread is already streaming an answer",
                               "thread_busy", THREAD_HEADER)
        case ContentTooLong():
            return OpenAIError(400, str(exc), "content_too_long", "messages")
        case CompletionFailed():
            return failure_error(exc.failure)
    return None


def database_unavailable(request: Request, exc: DatabaseUnavailable) -> OpenAIError:
    """As the native 503: one warning line, the metric, the configured Retry-After."""
    retry_after = note_database_unavailable(request, exc)
    return OpenAIError(503, DATABASE_UNAVAILABLE, "database_unavailable",
                       headers={"Retry-After": str(retry_after)})

Handler = Callable[[Request], Awaitable[Response]]


def openai_errors(handler: Handler) -> Handler:
    """The handler, answering every refusal and bug in OpenAI's shape (never the native
    `{"error": {"code", "message"}}`: an OpenAI client would not read it)."""

    async def wrapped(request: Request) -> Response:
        try:
            return await handler(request)
        except DatabaseUnavailable as exc:
            return database_unavailable(request, exc).response()
        except Exception as exc:
            error = refusal(exc)
            if error is None:
                log.exception("unhandled_error", path=request.url.path,
                              error=type(exc).__name__)
                error = OpenAIError(500, "internal error; see the server log", "internal_error")
            return error.response()

    return wrapped
