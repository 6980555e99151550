"""Errors in Anthropic's shape, `{"type": "error", "error": {"type", "message"}}`, with the
statuses Anthropic answers, for every way a `/v1/messages` request can go wrong: the
anthropic SDKs raise their typed errors from the status and show the message.

Which refusal a request gets, and with what status and headers, is decided once for every
`/v1` surface (app.turn.openai.errors.refusal); this module only says it Anthropic's way."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from app.answer.events import TurnFailure
from app.observe.logging import get_logger
from app.observe.redaction import SECRETS
from app.store.errors import DatabaseUnavailable
from app.turn.openai.errors import (
    OpenAIError,
    database_unavailable,
    failure_error,
    refusal,
)
from app.turn.openai.errors import database_unreachable as openai_database_unreachable

log = get_logger("api.anthropic")

#: Anthropic's error type for each status the gateway answers; any other 4xx is an
#: `invalid_request_error`, any other 5xx an `api_error`.
_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
          404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error",
          500: "api_error", 503: "overloaded_error", 529: "overloaded_error"}


class AnthropicError(Exception):
    """A refusal in Anthropic's terms: its status, message and headers (Retry-After)."""

    def __init__(self, status: int, message: str,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message = status, message
        self.headers = headers or {}

    @property
    def kind(self) -> str:
        return _TYPES.get(self.status, "api_error" if self.status >= 500
                          else "invalid_request_error")

    def body(self) -> dict[str, object]:
        # Messages may echo what a client or a model server sent: no secret goes back out.
        return {"type": "error",
                "error": {"type": self.kind, "message": SECRETS.text(self.message)}}

    def response(self) -> Response:
        headers = dict(self.headers)
        if self.status == 401:
            headers["WWW-Authenticate"] = "Bearer"
        return JSONResponse(self.body(), self.status, headers=headers or None)


def invalid(message: str) -> AnthropicError:
    return AnthropicError(400, message)


def from_openai(error: OpenAIError) -> AnthropicError:
    """The same refusal (status, message, headers), said Anthropic's way."""
    return AnthropicError(error.status, error.message, error.headers)


def failed(failure: TurnFailure) -> AnthropicError:
    """A call that failed at the model server or in the gateway (the status chat
    completions would answer)."""
    return from_openai(failure_error(failure))


def key_revoked() -> AnthropicError:
    return AnthropicError(401, "the API key was revoked")


def shutting_down() -> AnthropicError:
    return AnthropicError(503, "the gateway is shutting down; send the request again")


def database_unreachable() -> AnthropicError:
    """This process lost its database mid-answer, and so ended it (as chat completions'
    `database_unreachable`)."""
    return from_openai(openai_database_unreachable())


Handler = Callable[[Request], Awaitable[Response]]


def anthropic_errors(handler: Handler) -> Handler:
    """The handler, answering every refusal and bug in Anthropic's shape (an anthropic
    client reads neither the native nor OpenAI's error body)."""

    async def wrapped(request: Request) -> Response:
        try:
            return await handler(request)
        except AnthropicError as exc:
            return exc.response()
        except DatabaseUnavailable as exc:
            return from_openai(database_unavailable(request, exc)).response()
        except Exception as exc:
            error = refusal(exc)
            if error is None:
                log.exception("unhandled_error", path=request.url.path,
                              error=type(exc).__name__)
                return AnthropicError(500, "internal error; see the server log").response()
            return from_openai(error).response()

    return wrapped
