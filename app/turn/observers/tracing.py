"""Stream traces (`trace_streams`): keep the raw upstream chunks of a stream and the
filter's events in `stream_traces`, so scripts/replay_stream.py can replay a bad stream.

No per-chunk work here: while tracing is on, the turn's AnswerStream keeps its raw chunks
and the filter its warning records; the tracer reads both once, inside the finishing
transaction, and only for the streams the mode asks for:

    all     every stream
    errors  streams with a filter warning or a status other than `complete`
    off     none (the tracer is not registered)

A trace must never cost the message: it is written in a SAVEPOINT, and a failure is logged
(`turn_observer_failed`) and rolled back to it while the message is stored as usual."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from sqlalchemy.ext.asyncio import AsyncSession

from app.answer.finish import TurnOutcome
from app.answer.records import FinishedMessage
from app.answer.trace_replay import warning_event
from app.observe.logging import get_logger
from app.observe.redaction import SECRETS
from app.turn.observers.seam import TurnHandler, TurnView
from app.turn.rows import FinishedRow, traces

log = get_logger("services.tracing")

TraceMode = Literal["errors", "all"]


def wants_trace(mode: TraceMode, outcome: TurnOutcome, finished: FinishedMessage) -> bool:
    if mode == "all":
        return True
    return finished.status != "complete" or bool(outcome.warnings)


def finish_event(outcome: TurnOutcome, finished: FinishedMessage) -> dict[str, Any]:
    """How the stream ended, and the content the gateway stored for it."""
    return {
        "type": "finish", "status": finished.status, "filter_closed": outcome.filter_closed,
        "finish_reason": outcome.finish_reason,
        "error": outcome.failure.code if outcome.failure else None,
        "chunks": outcome.text_chunks, "content": finished.content,
        # the other channel (app.answer.trace_replay feeds both): kept in the event, the
        # trace's JSON
        "reasoning": finished.reasoning or "",
        "reasoning_chunks": [list(piece) for piece in outcome.raw_reasoning or ()],
        "reasoning_format": outcome.reasoning_format, "reasoning_tag": outcome.reasoning_tag,
        # inline tool calls (app.stream.tools): how the split read them, and those given out
        "tool_format": outcome.tool_format, "tool_tag": outcome.tool_tag,
        "tools_offered": outcome.tools_offered,
        "tool_calls": [list(call) for call in outcome.tool_calls],
    }


def redacted_chunks(raw: Sequence[str], finish: dict[str, Any]) -> list[str]:
    """The raw chunks with every secret replaced (app.observe.redaction): a trace is read by people
    and leaves in files. How many chunks changed is noted in the finish event
    (`redacted`), so a replay that differs from the stored text says why."""
    chunks = [SECRETS.text(chunk) for chunk in raw]
    if changed := sum(a != b for a, b in zip(chunks, raw, strict=True)):
        finish["redacted"] = changed
    return chunks


class StreamTracer:
    """Writes the trace of the streams `mode` selects."""

    def __init__(self, mode: TraceMode) -> None:
        self.mode: TraceMode = mode

    def open(self, view: TurnView) -> TurnHandler:
        return _TraceHandler(self.mode, view)


class _TraceHandler(TurnHandler):
    def __init__(self, mode: TraceMode, view: TurnView) -> None:
        self.mode: TraceMode = mode
        self.view = view
        self.traced = False

    def may_write_in_finish(self, finished: FinishedMessage, outcome: TurnOutcome) -> bool:
        return outcome.raw_chunks is not None and wants_trace(self.mode, outcome, finished)

    def writes_in_finish(self, finished: FinishedMessage, outcome: TurnOutcome,
                         row: FinishedRow) -> bool:
        return self.may_write_in_finish(finished, outcome)

    async def in_finish_transaction(
        self, session: AsyncSession, finished: FinishedMessage, outcome: TurnOutcome,
        row: FinishedRow,
    ) -> None:
        self.traced = False
        if outcome.raw_chunks is None or not wants_trace(self.mode, outcome, finished):
            return
        events = [warning_event(w) for w in outcome.warnings]
        events.append(finish_event(outcome, finished))
        chunks = redacted_chunks(outcome.raw_chunks, events[-1])
        await traces.save_trace(
            session, message_id=self.view.message_id, thread_id=self.view.thread_id,
            user_id=self.view.user_id, model=outcome.model, status=finished.status,
            chunks=chunks, events=SECRETS.value(events),
        )
        self.traced = True  # reached only when the trace is written

    async def after_finish(
        self, finished: FinishedMessage, outcome: TurnOutcome, *, stored: bool
    ) -> None:
        """Logged once committed, so the line never names a trace that was rolled back."""
        if stored and self.traced:
            log.info("stream_traced", mode=self.mode, status=finished.status,
                     chunks=outcome.text_chunks,
                     warnings=[w.kind for w in outcome.warnings])
