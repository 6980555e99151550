"""The end of a turn: the message to store (clean content, metadata, status, calls) and the
events that close the client's stream once the store has answered."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from app.answer.answer import AnswerStream
from app.answer.events import Ended, Failed, Metadata, TurnEvent, TurnFailure, Usage
from app.answer.interruptions import CANCELLED
from app.answer.recorder import TurnRecorder
from app.answer.records import CallRecord, FinalStatus, FinishedMessage
from app.core.cleaning import SanitizeReport, clean_json
from app.stream import FilterWarning

#: How the finishing transaction ended: "failed" is retried in the background; the two others
#: that are not "stored" are final (someone else settled the row, or the thread is gone).
StoreResult = Literal["stored", "already_finished", "thread_gone", "failed"]


@dataclass(frozen=True, slots=True)
class TurnOutcome:
    """How the stream went, as plain values for whatever runs at the end (traces, metrics,
    follow-up scheduling)."""

    status: FinalStatus
    failure: TurnFailure | None
    finish_reason: str | None
    model: str
    text_chunks: int
    #: The raw chunks, when the process keeps them (stream traces), else None.
    raw_chunks: tuple[str, ...] | None
    warnings: tuple[FilterWarning, ...]
    filter_closed: bool
    #: time.monotonic() of the turn's start and of its first token.
    started: float
    first_token: float | None
    calls: tuple[CallRecord, ...]
    #: The raw reasoning field deltas with their places (see AnswerStream.raw_reasoning),
    #: when the raw chunks are kept; the format and tag the split ran with.
    raw_reasoning: tuple[tuple[int, str], ...] | None = None
    reasoning_format: str = "think"
    reasoning_tag: str = "think"
    #: The inline tool call format and tag, whether tools were offered, and the calls given
    #: out as (name, arguments) (a trace replays with them and compares the calls).
    tool_format: str = "none"
    tool_tag: str = "tool_call"
    tools_offered: bool = False
    tool_calls: tuple[tuple[str, str], ...] = ()


def outcome_of(answer: AnswerStream, recorder: TurnRecorder, *, model: str) -> TurnOutcome:
    raw = answer.raw_chunks
    return TurnOutcome(
        status=answer.status, failure=answer.failure, finish_reason=answer.finish_reason,
        model=answer.model or model, text_chunks=answer.text_chunks,
        raw_chunks=tuple(raw) if raw is not None else None, warnings=tuple(answer.warnings),
        filter_closed=answer.filter_closed, started=recorder.started,
        first_token=recorder.first_token, calls=tuple(recorder.calls),
        raw_reasoning=(tuple(answer.raw_reasoning) if answer.raw_reasoning is not None
                       else None),
        reasoning_format=answer.reasoning_format, reasoning_tag=answer.reasoning_tag,
        tool_format=answer.tool_format, tool_tag=answer.tool_tag,
        tools_offered=answer.tools_offered,
        tool_calls=tuple((call.name, call.arguments) for call in answer.tool_calls),
    )


def summary_fields(finished: FinishedMessage, outcome: TurnOutcome, *, duration_ms: int
                   ) -> dict[str, Any]:
    """What the turn's one summary log line says of it: figures and names, never text;
    `duration_ms` runs to the line (the finishing transaction included)."""
    meta = finished.metadata
    return {"status": finished.status, "chunks": outcome.text_chunks,
            "ttft_ms": meta["ttft_ms"], "duration_ms": duration_ms,
            "tokens": meta["tokens"], "usage_source": meta["usage_source"],
            "warnings": meta["stream"]["warnings"],
            "error": outcome.failure.code if outcome.failure else None}


def finished_message(
    message_id: uuid.UUID, answer: AnswerStream, recorder: TurnRecorder, *, model: str,
    stopped_by: str | None = None,
) -> FinishedMessage:
    """The row as it will be stored; `model` is the one asked for, used when the model
    server named none. An `interrupted` answer says why (`interrupted_reason`): what
    stopped it (`stopped_by`, app.answer.interruptions), else CANCELLED."""
    metadata: dict[str, Any] = {
        **recorder.totals(),
        "model": answer.model or model,
        "processing_time_ms": recorder.elapsed_ms(),
        "ttft_ms": recorder.ttft_ms,
        "response_metadata": dict(answer.metadata or {}),
        "stream": {"chunks": answer.text_chunks, "warnings": answer.warning_names,
                   "finish_reason": answer.finish_reason},
        "processingDetails": {
            "pipeline_stages": dict(recorder.stages),
            "llm_calls": [call.as_metadata() for call in recorder.calls],
        },
    }
    if answer.failure is not None:
        metadata["error"] = {"code": answer.failure.code, "message": answer.failure.message}
    if answer.status == "interrupted":
        metadata["interrupted_reason"] = stopped_by or CANCELLED
    return FinishedMessage(
        message_id=message_id,
        content=answer.content,
        metadata=answer.sanitized.merge_into(metadata),
        status=answer.status,
        llm_calls=list(recorder.calls),
        reasoning=answer.reasoning or None,
        reasoning_ms=answer.reasoning_ms if answer.reasoning else None,
    )


def reasoning_tokens(calls: Sequence[CallRecord]) -> int | None:
    """The reasoning tokens the turn's calls reported, summed; None when none reported any
    (a model server that does not count them is not one that thought for 0 tokens)."""
    reported = [call.reasoning_tokens for call in calls if call.reasoning_tokens is not None]
    return sum(reported) if reported else None


def closing_events(
    finished: FinishedMessage, answer: AnswerStream, result: StoreResult
) -> list[TurnEvent]:
    """After the finishing transaction: a client that reloads on `Ended` sees the row."""
    if result != "stored":
        return [not_stored(result)]
    events: list[TurnEvent] = []
    if answer.metadata:
        # Cleaned as the store cleans response_metadata: the event equals the stored copy.
        events.append(Metadata(clean_json(dict(answer.metadata), SanitizeReport())))
    meta = finished.metadata
    events.append(Usage(
        prompt_tokens=meta["prompt_tokens"], completion_tokens=meta["completion_tokens"],
        total_tokens=meta["tokens"], cost_usd=meta["cost_usd"],
        usage_source=meta["usage_source"],
        reasoning_tokens=reasoning_tokens(finished.llm_calls),
    ))
    if answer.failure is not None:
        events.append(Failed(answer.failure.code, answer.failure.message))
    else:
        events.append(Ended(finished.message_id, answer.status))
    return events


def not_stored(result: StoreResult) -> Failed:
    """What the client is told when its answer is not (or not yet) in the database."""
    if result == "thread_gone":
        return Failed("thread_deleted",
                      "the thread was deleted while the answer streamed; nothing was stored")
    if result == "already_finished":
        return Failed("storage_error",
                      "the answer was already settled elsewhere and was not stored again")
    return Failed("storage_error",
                  "the answer could not be stored yet; the gateway keeps trying for a while")
