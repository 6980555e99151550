"""Upstream failures reduced to the three codes a client can act on."""

from __future__ import annotations

import json
from typing import Literal

import httpx
import openai

from app.sanitize import clean_and_strip_markers

UpstreamErrorCode = Literal["upstream_unavailable", "upstream_timeout", "upstream_error"]

#: What talking to the model server can raise besides UpstreamError: the SDK's and httpx's
#: errors, a body cut or read twice (httpx.StreamError is no HTTPError), a stream line that is
#: not JSON (the SDK decodes it with json.loads), and asyncio timeouts.
UPSTREAM_FAILURES: tuple[type[BaseException], ...] = (
    openai.APIError, httpx.HTTPError, httpx.StreamError, json.JSONDecodeError, TimeoutError,
)


class UpstreamError(Exception):
    """The model server could not be reached, was too slow, or answered with an error."""

    def __init__(self, code: UpstreamErrorCode, message: str,
                 http_status: int | None = None) -> None:
        super().__init__(message)
        self.code: UpstreamErrorCode = code
        self.message = message
        #: The model server's HTTP status when it answered with one (429 and 5xx call for
        #: different fixes); None when it never answered.
        self.http_status = http_status


def classify(exc: BaseException) -> UpstreamError:
    """Map an openai/httpx exception to an UpstreamError (order matters: timeouts are also
    connection errors in both libraries)."""
    if isinstance(exc, UpstreamError):
        return exc
    if isinstance(exc, openai.APITimeoutError | httpx.TimeoutException | TimeoutError):
        return UpstreamError("upstream_timeout", "the model server did not answer in time")
    if isinstance(exc, openai.APIConnectionError | httpx.ConnectError):
        return UpstreamError("upstream_unavailable", "the model server cannot be reached")
    if isinstance(exc, openai.APIStatusError):
        return UpstreamError(
            "upstream_error", f"the model server answered {exc.status_code}: {_short(exc)}",
            http_status=exc.status_code,
        )
    if isinstance(exc, openai.APIError | httpx.HTTPError):
        return UpstreamError("upstream_error", f"the model server failed: {_short(exc)}")
    if isinstance(exc, json.JSONDecodeError):
        return UpstreamError("upstream_error", "the model server sent malformed JSON")
    return UpstreamError("upstream_error", f"unexpected upstream failure: {type(exc).__name__}")


def _short(exc: BaseException) -> str:
    """The provider's message, shortened. It reaches the client's `error` event and the stored
    `metadata.error`, and some providers echo the request: markers (an echoed MSG_CONTEXT)
    go through the same filter as any model text."""
    text = clean_and_strip_markers(str(exc)).text or type(exc).__name__
    return text if len(text) <= 300 else text[:297] + "..."
