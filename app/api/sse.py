"""The turn as a `text/event-stream`: JSON data per event, `id:` on deltas, keep-alive pings
(sse-starlette comment lines) during silences."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import aclosing

from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.types import Receive, Scope, Send

from app.services.shield import run_shielded
from app.services.turn import Turn, TurnEvent


def encode(event: TurnEvent) -> ServerSentEvent:
    data = json.dumps(event.data, ensure_ascii=False, separators=(",", ":"))
    return ServerSentEvent(data=data, event=event.event, id=event.id, sep="\n")


async def _sse_events(turn: Turn) -> AsyncIterator[ServerSentEvent]:
    # aclosing: when sse-starlette closes this generator (a failed send), the turn's own
    # generator is closed with it now, not whenever the garbage collector gets to it.
    async with aclosing(turn.events()) as events:
        async for event in events:
            yield encode(event)


class TurnStreamResponse(EventSourceResponse):
    """An SSE response that always settles its turn: if the client leaves before the
    generator even starts, the turn is still finished (as `interrupted`)."""

    def __init__(self, turn: Turn, *, ping_s: float, send_timeout_s: float) -> None:
        super().__init__(_sse_events(turn), ping=ping_s, sep="\n", send_timeout=send_timeout_s)
        self._turn = turn

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await run_shielded(self._turn.finish())
