"""Stream traces (`trace_streams`): keep the raw upstream chunks of a stream and the
filter's events in `stream_traces`, so scripts/replay_stream.py can replay a bad stream.

No per-chunk work: the turn already keeps its raw chunks (`turn.raw_parts`, needed for the
token estimate) and the filter its warning records; the tracer reads both once, inside the
finishing transaction, and only for the streams the mode asks for:

    all     every stream
    errors  streams with a filter warning or a status other than `complete`
    off     none (the tracer is not registered)

A trace must never cost the message: it is written in a SAVEPOINT, and a failure is logged
(`stream_trace_failed`) and rolled back to it while the message is stored as usual."""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any, Literal

from sqlalchemy.ext.asyncio import AsyncSession

from app.logging import get_logger
from app.replay import warning_event
from app.services.observers import TurnObserver
from app.store import traces

if TYPE_CHECKING:
    from app.services.turn import Turn
    from app.turns.records import FinishedMessage

log = get_logger("services.tracing")

TraceMode = Literal["errors", "all"]


def wants_trace(mode: TraceMode, turn: Turn, finished: FinishedMessage) -> bool:
    if mode == "all":
        return True
    return finished.status != "complete" or bool(turn.filter.records)


def finish_event(turn: Turn, finished: FinishedMessage) -> dict[str, Any]:
    """How the stream ended, and the content the gateway stored for it."""
    return {
        "type": "finish", "status": finished.status, "filter_closed": turn.filter_closed,
        "finish_reason": turn.finish_reason,
        "error": turn.failure.code if turn.failure else None,
        "chunks": len(turn.raw_parts), "content": finished.content,
    }


class StreamTracer(TurnObserver):
    """Writes the trace of the streams `mode` selects."""

    def __init__(self, mode: TraceMode) -> None:
        self.mode: TraceMode = mode
        self._traced: weakref.WeakSet[Turn] = weakref.WeakSet()

    async def in_finish_transaction(
        self, session: AsyncSession, turn: Turn, finished: FinishedMessage
    ) -> None:
        self._traced.discard(turn)
        if not wants_trace(self.mode, turn, finished):
            return
        events = [warning_event(r) for r in turn.filter.records]
        events.append(finish_event(turn, finished))
        await traces.save_trace(
            session, message_id=turn.message_id, thread_id=turn.thread.id, user_id=turn.user_id,
            model=turn.response_model or turn.deps.upstream.model,
            status=finished.status, chunks=turn.raw_parts, events=events,
        )
        self._traced.add(turn)  # reached only when the trace is written (see Turn._store)

    async def after_finish(self, turn: Turn, finished: FinishedMessage) -> None:
        """Logged once committed, so the line never names a trace that was rolled back."""
        if turn in self._traced:
            self._traced.discard(turn)
            log.info("stream_traced", mode=self.mode, status=finished.status,
                     chunks=len(turn.raw_parts), warnings=list(turn.filter.warnings))
