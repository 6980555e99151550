"""The streamed chat request, sent over the shared httpx client without the SDK.

The SDK's request path (its options, headers and response models) cost about a twentieth of
a turn's CPU on top of httpx's own; what the gateway needs of it is small and kept here, the
same as the SDK does it: the JSON body, bearer auth, and retries of a failed
connection, a timeout, or a 408, 409, 429 or 5xx answer (unless the server says
`x-should-retry: false`), waiting what `retry-after-ms` or `retry-after` asks (up to 60 s),
else 0.5 s doubling to 8 s with up to a quarter of jitter off. The non-streamed calls
(title, summary) still go through the SDK."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Mapping
from typing import Any

import httpx
import orjson

from app.core.cleaning import replace_surrogates
from app.upstream.errors import (
    LOGGED_DETAIL_CHARS,
    UpstreamError,
    body_head,
    classify,
    upstream_failure,
)

RETRIED_STATUSES = frozenset({408, 409, 429})
RETRY_AFTER_MAX_S = 60.0
BACKOFF_FIRST_S, BACKOFF_MAX_S = 0.5, 8.0


def retry_pause_s(attempt: int, headers: httpx.Headers | None) -> float:
    """The pause before retry number `attempt` (0 for the first retry)."""
    asked = _retry_after_s(headers) if headers is not None else None
    if asked is not None and 0 < asked <= RETRY_AFTER_MAX_S:
        return asked
    return min(BACKOFF_FIRST_S * 2.0 ** attempt, BACKOFF_MAX_S) * (1 - 0.25 * random.random())


def _retry_after_s(headers: httpx.Headers) -> float | None:
    try:
        if "retry-after-ms" in headers:
            return float(headers["retry-after-ms"]) / 1000
        if "retry-after" in headers:
            return float(headers["retry-after"])
    except ValueError:
        return None
    return None


def should_retry(response: httpx.Response) -> bool:
    said: str | None = response.headers.get("x-should-retry")
    if said in ("true", "false"):
        return said == "true"
    status: int = response.status_code
    return status in RETRIED_STATUSES or status >= 500


class StreamSender:
    """POSTs a streamed chat completion; answers the response with its body unread."""

    def __init__(self, http: httpx.AsyncClient, base_url: str, api_key: str,
                 max_retries: int, timeout: httpx.Timeout | None = None) -> None:
        self._http = http
        #: This model's own timeouts over the shared client's (None: the client's).
        self._timeout = timeout
        # Parsed once: httpx parses a URL given as a string on every request, half the cost
        # of building one (91 against 40 us).
        self._url = httpx.URL(base_url.rstrip("/") + "/chat/completions")
        self._headers = {"Authorization": f"Bearer {api_key}",
                         "Content-Type": "application/json", "Accept": "text/event-stream"}
        self._max_retries = max_retries

    async def send(self, body: Mapping[str, Any]) -> httpx.Response:
        """Raises UpstreamError once the retries are spent (or for an answer not retried)."""
        content = _encoded(body)
        headers = {**self._headers, "Content-Length": str(len(content))}
        for attempt in range(self._max_retries + 1):
            retries_left = attempt < self._max_retries
            try:
                response = await self._http.send(
                    self._http.build_request(
                        "POST", self._url, content=_once(content), headers=headers,
                        timeout=self._timeout or self._http.timeout), stream=True)
            except httpx.TransportError as exc:  # timeouts included
                if not retries_left:
                    raise classify(exc) from exc
                await asyncio.sleep(retry_pause_s(attempt, None))
                continue
            if response.is_success:
                return response
            if retries_left and should_retry(response):
                await response.aclose()
                await asyncio.sleep(retry_pause_s(attempt, response.headers))
                continue
            raise await _status_error(response)
        raise AssertionError("unreachable: the last attempt returns or raises")


def _encoded(body: Mapping[str, Any]) -> bytes:
    """The body as JSON. The request parsers replace lone surrogates already; one that got
    past them (no UTF-8 text can hold it, and orjson refuses it) goes as U+FFFD, as the
    store would write it, instead of failing the turn."""
    try:
        return orjson.dumps(body)
    except orjson.JSONEncodeError:
        return orjson.dumps(replace_surrogates(dict(body)))


async def _once(content: bytes) -> AsyncIterator[bytes]:
    """The body, handed over once. The streamed response keeps its request for as long as
    the answer streams, and a request made from bytes keeps them: the whole history's JSON,
    a few KB per open stream and more on long threads. Given its length, httpx sends it
    whole, not chunked."""
    yield content


async def _status_error(response: httpx.Response) -> UpstreamError:
    """The model server answered with an error status: the start of its body goes to the
    log (more than is logged: the markers removed from it may shorten it); the wait it
    asked for goes with the error, for a client its status is passed on to."""
    return upstream_failure("upstream_error", http_status=response.status_code,
                            reason=f"HTTP {response.status_code}",
                            detail=await body_head(response, LOGGED_DETAIL_CHARS * 4),
                            retry_after_s=_retry_after_s(response.headers))
