"""The turn as a `text/event-stream`: JSON data per event, `id:` on deltas, keep-alive pings
(sse-starlette comment lines) during silences."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractContextManager, aclosing
from typing import Any

import anyio
from sse_starlette import EventSourceResponse, ServerSentEvent
from sse_starlette.sse import SendTimeoutError
from starlette.types import Message, Receive, Scope, Send

from app.api.errors import error_response
from app.logging import get_logger
from app.services.shield import run_shielded
from app.services.turn import Turn
from app.turns.events import Delta, Ended, Failed, Metadata, Started, TurnEvent, Usage

log = get_logger("api.sse")


def sse_event(name: str, data: Any, event_id: str | None = None) -> ServerSentEvent:
    """One event: compact JSON data, plain `\n` line ends."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return ServerSentEvent(data=text, event=name, id=event_id, sep="\n")


def encode(event: TurnEvent) -> ServerSentEvent:
    """A turn event in the native dialect (docs/api.md): deltas carry `id:` = their count."""
    match event:
        case Delta(text, seq):
            return sse_event("delta", {"text": text}, str(seq))
        case Started(thread_id, user_message_id, message_id):
            return sse_event("message_start", {
                "thread_id": str(thread_id), "user_message_id": str(user_message_id),
                "assistant_message_id": str(message_id)})
        case Metadata(values):
            return sse_event("metadata", values)
        case Usage():
            return sse_event("usage", {
                "prompt_tokens": event.prompt_tokens,
                "completion_tokens": event.completion_tokens,
                "total_tokens": event.total_tokens, "cost_usd": event.cost_usd,
                "usage_source": event.usage_source})
        case Ended(message_id, status):
            return sse_event("message_end", {"message_id": str(message_id), "status": status})
        case Failed(code, message):
            return sse_event("error", {"code": code, "message": message})


#: Opens the stream's watch on its API key: an event set once the key is revoked.
RevocationGuard = Callable[[], AbstractContextManager[asyncio.Event]]
KEY_REVOKED = sse_event("error", {"code": "key_revoked", "message": "the API key was revoked"})


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
        started = False

        async def tracking_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        with revocation() as revoked:
            async with anyio.create_task_group() as group:
                async def cancel_when_revoked() -> None:
                    await revoked.wait()
                    group.cancel_scope.cancel()

                group.start_soon(cancel_when_revoked)
                await super().__call__(scope, receive, tracking_send)
                group.cancel_scope.cancel()
        if revoked.is_set():
            log.info("sse_key_revoked", path=scope.get("path"), **self._log_ids)
            if started:
                await send({"type": "http.response.body", "more_body": False,
                            "body": KEY_REVOKED.encode()})
            else:  # revoked between authentication and the first byte: as if refused then
                await error_response(401, "unauthorized", "invalid or revoked API key")(
                    scope, receive, send)


async def _sse_events(turn: Turn) -> AsyncIterator[ServerSentEvent]:
    # aclosing: when sse-starlette closes this generator (a failed send), the turn's own
    # generator is closed with it now, not whenever the garbage collector gets to it.
    async with aclosing(turn.events()) as events:
        async for event in events:
            yield encode(event)


class TurnStreamResponse(StreamResponse):
    """An SSE response that always settles its turn: if the client leaves before the
    generator even starts, the turn is still finished (as `interrupted`)."""

    def __init__(self, turn: Turn, *, ping_s: float, send_timeout_s: float,
                 revocation: RevocationGuard | None = None) -> None:
        super().__init__(_sse_events(turn), ping=ping_s, sep="\n", send_timeout=send_timeout_s,
                         log_ids=turn.log_ids, revocation=revocation)
        self._turn = turn

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await run_shielded(self._turn.finish())
