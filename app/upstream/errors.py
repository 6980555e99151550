"""Upstream failures reduced to the codes a client can act on, each with one short sentence a
user can read. What the model server said goes to the log only: its bodies are long, in its
own jargon, and some echo the request (the user's words) back."""

from __future__ import annotations

import json
from typing import Literal

import httpx
import openai

from app.core.cleaning import clean_and_strip_markers
from app.observe.logging import get_logger

log = get_logger("upstream")

UpstreamErrorCode = Literal[
    "upstream_unavailable", "upstream_timeout", "upstream_error",
    "upstream_truncated", "upstream_bad_response", "answer_too_long",
]

#: What the user reads in the `error` event and in the stored `metadata.error.message`.
MESSAGES: dict[UpstreamErrorCode, str] = {
    "upstream_unavailable": "The model server could not be reached.",
    "upstream_timeout": "The model server did not answer in time.",
    "upstream_error": "The model server failed.",
    "upstream_truncated": "The model server's answer broke off before its end.",
    "upstream_bad_response": "The model server sent an answer the gateway cannot read.",
    "answer_too_long": "The answer took longer than the gateway allows and was cut.",
}

#: How much of the model server's own words a log line keeps.
LOGGED_DETAIL_CHARS = 500

#: What talking to the model server can raise besides UpstreamError: the SDK's and httpx's
#: errors, a body cut or read twice (httpx.StreamError is no HTTPError), and asyncio timeouts.
UPSTREAM_FAILURES: tuple[type[BaseException], ...] = (
    openai.APIError, httpx.HTTPError, httpx.StreamError, json.JSONDecodeError, TimeoutError,
)


class UpstreamError(Exception):
    """The model server could not be reached, was too slow, answered with an error, broke
    off, or sent something that is no chat completion stream."""

    def __init__(self, code: UpstreamErrorCode, message: str | None = None,
                 http_status: int | None = None, retry_after_s: float | None = None) -> None:
        if message is None:
            message = (f"The model server failed (HTTP {http_status})."
                       if code == "upstream_error" and http_status else MESSAGES[code])
        super().__init__(message)
        self.code: UpstreamErrorCode = code
        self.message = message
        #: The model server's HTTP status when it answered with one (429 and 5xx call for
        #: different fixes); None when it never answered.
        self.http_status = http_status
        #: The wait its answer asked for (`retry-after-ms` or `retry-after`), if any.
        self.retry_after_s = retry_after_s


def upstream_failure(code: UpstreamErrorCode, *, http_status: int | None = None,
                     reason: str, detail: str = "",
                     retry_after_s: float | None = None) -> UpstreamError:
    """The error a user sees, after one WARNING line for the operator: the code, the status,
    what went wrong (`reason`, the gateway's own words) and the server's words (`detail`),
    shortened and with markers removed (an echoed MSG_CONTEXT is the user's history)."""
    log.warning("upstream_failed", code=code, http_status=http_status, reason=reason,
                detail=logged_detail(detail) if detail else None)
    return UpstreamError(code, http_status=http_status, retry_after_s=retry_after_s)


async def body_head(response: httpx.Response, limit: int) -> str:
    """The start of an answer's body that is no streamed answer, for the log: at most
    `limit` bytes are read (an error page may be large), then the connection is dropped."""
    head = b""
    try:
        async for block in response.aiter_bytes():
            head += block
            if len(head) >= limit:
                break
    except UPSTREAM_FAILURES:
        pass
    finally:
        await response.aclose()
    return head[:limit].decode("utf-8", "replace")


def logged_detail(text: str) -> str:
    """The model server's words as a log line may keep them."""
    cleaned = clean_and_strip_markers(text).text
    if len(cleaned) <= LOGGED_DETAIL_CHARS:
        return cleaned
    return cleaned[:LOGGED_DETAIL_CHARS] + "..."


def classify(exc: BaseException) -> UpstreamError:
    """Map an openai/httpx exception to an UpstreamError (order matters: timeouts are also
    connection errors in both libraries)."""
    if isinstance(exc, UpstreamError):
        return exc
    reason = type(exc).__name__
    if isinstance(exc, openai.APITimeoutError | httpx.TimeoutException | TimeoutError):
        return upstream_failure("upstream_timeout", reason=reason)
    if isinstance(exc, openai.APIConnectionError | httpx.ConnectError):
        return upstream_failure("upstream_unavailable", reason=reason)
    if isinstance(exc, openai.APIStatusError):
        return upstream_failure("upstream_error", http_status=exc.status_code, reason=reason,
                                detail=str(exc))
    if isinstance(exc, json.JSONDecodeError):
        return upstream_failure("upstream_bad_response", reason=reason)
    if isinstance(exc, openai.APIError | httpx.HTTPError | httpx.StreamError):
        return upstream_failure("upstream_error", reason=reason, detail=str(exc))
    return upstream_failure("upstream_error", reason=reason)
