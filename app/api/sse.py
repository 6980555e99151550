"""Server-sent events in the native format: JSON data per event, `id:` on deltas. A turn's
events are encoded to these frames by app.turn.native.frames and written by
app.turn.native.log_stream (app.api.event_stream's FrameResponse); the long-lived thread events
stream keeps sse-starlette (StreamResponse)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

import anyio
import orjson
from sse_starlette import EventSourceResponse, ServerSentEvent
from sse_starlette.sse import SendTimeoutError
from starlette.types import Message, Receive, Scope, Send

from app.api.event_stream import RevocationGuard, end_revoked
from app.observe.logging import get_logger

log = get_logger("api.sse")


def sse_event(name: str, data: Any, event_id: str | None = None) -> ServerSentEvent:
    """One event for sse-starlette (the thread events stream): the same bytes as `frame`."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return ServerSentEvent(data=text, event=name, id=event_id, sep="\n")


def json_bytes(data: Any) -> bytes:
    """Compact UTF-8 JSON. orjson (about 10x the standard encoder) refuses what JSON cannot
    carry as is (a lone surrogate, an integer beyond 64 bits): the standard encoder then
    writes it with escapes."""
    try:
        return orjson.dumps(data)
    except TypeError:
        return json.dumps(data, separators=(",", ":")).encode()


def frame(name: str, data: Any, event_id: str | None = None) -> bytes:
    """One SSE frame: `id:` (if any), `event:`, one `data:` line of compact JSON, `\n` ends."""
    head = b"event: %s\ndata: " % name.encode()
    if event_id is not None:
        head = b"id: %s\n%s" % (event_id.encode(), head)
    return head + json_bytes(data) + b"\n\n"


class StreamResponse(EventSourceResponse):
    """An EventSourceResponse for which a client too slow to take a send within
    `send_timeout` is the client's problem: logged at INFO, not raised to the 500 path.
    `log_ids` go on that line: the ids a generator binds stay in the generator's own task.
    With `revocation`, the stream ends (an `error` event `key_revoked`, then the end of the
    body) once its key is revoked: the stream is cancelled as if its client had left."""

    def __init__(self, content: AsyncIterator[ServerSentEvent], *,
                 log_ids: Mapping[str, str] | None = None,
                 revocation: RevocationGuard | None = None, **kwargs: Any) -> None:
        super().__init__(content, **kwargs)
        self._log_ids = dict(log_ids or {})
        self._revocation = revocation

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            if self._revocation is None:
                await super().__call__(scope, receive, send)
            else:
                await self._until_revoked(self._revocation, scope, receive, send)
        except SendTimeoutError:
            log.info("sse_send_timeout", path=scope.get("path"), **self._log_ids)

    async def _until_revoked(self, revocation: RevocationGuard, scope: Scope,
                             receive: Receive, send: Send) -> None:
        """The response, cancelled from outside (one cancel scope per stream, nothing per
        event) when the key's revocation is seen; the stream then ends cleanly for the
        client if its headers were sent."""
        started = revoked = False

        async def tracking_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        with anyio.CancelScope() as cancel:
            def on_revoked() -> None:
                nonlocal revoked
                revoked = True
                cancel.cancel()

            with revocation(on_revoked):
                await super().__call__(scope, receive, tracking_send)
        if revoked:
            await end_revoked(scope, receive, send, started=started, log_ids=self._log_ids)
