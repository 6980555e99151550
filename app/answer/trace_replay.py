"""Stream traces and their replay, pure (no asyncio, sqlalchemy or httpx).

A trace is what `trace_streams` keeps of one stream (app/turn/observers/tracing.py): the raw
upstream content chunks exactly as they were fed to the filter, the filter's events as the
gateway saw them (one `warning` event per FilterWarning, one `finish` event), and the stored
message it produced. `replay()` runs the chunks through the same MarkerFilter the gateway
uses and says, chunk by chunk, what was emitted and which warnings were raised, and whether
the result is the stored content. The JSON form is the trace file of scripts/replay_stream.py.

A reasoning model's stream has a second channel: the finish event keeps the raw reasoning
field deltas, each with its place among the content chunks, the reasoning stored and the
format and tag the gateway split with; the replay runs both channels through the same
ReasoningSplit in that order (a trace without them replays as a plain stream did). Likewise
an answer read with an inline tool call format: the finish event keeps the format, the tag,
whether the request offered tools and the calls given out; the replay reads the calls with
the same split and says at which chunk each came out, and whether they are the ones given.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app.core.cleaning import clean_text
from app.stream import (
    REASONING_FORMATS,
    TOOL_FORMATS,
    FilterWarning,
    ReasoningFormat,
    ReasoningSplit,
    ToolCall,
    ToolFormat,
)

TRACE_FORMAT = "chatgate.stream_trace"
TRACE_VERSION = 1


class TraceFormatError(ValueError):
    """A trace file that is not a Chatgate stream trace (the message says what is wrong)."""


@dataclass(frozen=True)
class Trace:
    """One traced stream and the message it produced."""

    message_id: str
    thread_id: str
    user_id: str
    model: str | None
    status: str | None
    """The message's status when the stream finished."""
    chunks: list[str]
    events: list[dict[str, Any]]
    created_at: str | None
    stored_content: str
    """The message's content as stored (now, when loaded from the database)."""
    stored_metadata: dict[str, Any] = field(default_factory=dict)
    """The message's `metadata.response_metadata` as stored."""

    @property
    def finish(self) -> dict[str, Any]:
        """The `finish` event ({} for a trace without one)."""
        return next((e for e in self.events if e.get("type") == "finish"), {})

    @property
    def filter_closed(self) -> bool:
        """Whether the gateway closed the filter (an interrupted stream is not closed: only
        what was already emitted was stored)."""
        return bool(self.finish.get("filter_closed", True))

    @property
    def reasoning_chunks(self) -> list[tuple[int, str]]:
        """The raw reasoning field deltas, each with how many content chunks preceded it."""
        pieces = self.finish.get("reasoning_chunks") or []
        return [(int(place), str(text)) for place, text in pieces]

    @property
    def stored_reasoning(self) -> str:
        """The reasoning the gateway stored for the stream ("" for none)."""
        return str(self.finish.get("reasoning") or "")

    @property
    def reasoning_format(self) -> ReasoningFormat:
        """The format the gateway split with; `none` for a trace from before the split (the
        gateway then showed a leading <think> block as text, and the replay must too)."""
        name = self.finish.get("reasoning_format", "none")
        return next((f for f in REASONING_FORMATS if f == name), "none")

    @property
    def reasoning_tag(self) -> str:
        return str(self.finish.get("reasoning_tag") or "think")

    @property
    def tool_format(self) -> ToolFormat:
        """The inline tool call format the gateway read with; `none` for a trace from before
        the format (the gateway then showed the calls as text)."""
        name = self.finish.get("tool_format", "none")
        return next((f for f in TOOL_FORMATS if f == name), "none")

    @property
    def tool_tag(self) -> str:
        return str(self.finish.get("tool_tag") or "tool_call")

    @property
    def tools_offered(self) -> bool:
        return bool(self.finish.get("tools_offered", False))

    @property
    def stored_tool_calls(self) -> list[ToolCall]:
        """The inline calls the gateway gave out for the stream, in order."""
        pieces = self.finish.get("tool_calls") or []
        return [ToolCall(str(name), str(arguments)) for name, arguments in pieces]

    @property
    def recorded_warnings(self) -> list[dict[str, Any]]:
        return [e for e in self.events if e.get("type") == "warning"]


def warning_event(record: FilterWarning) -> dict[str, Any]:
    """A FilterWarning as a trace event."""
    return {"type": "warning", "kind": record.kind, "marker": record.marker,
            "chunk_index": record.chunk_index, "offset": record.offset, "end": record.end}


# -- the trace file -------------------------------------------------------------------------


def trace_to_json(trace: Trace) -> dict[str, Any]:
    return {
        "format": TRACE_FORMAT, "version": TRACE_VERSION,
        "message_id": trace.message_id, "thread_id": trace.thread_id,
        "user_id": trace.user_id, "model": trace.model, "status": trace.status,
        "created_at": trace.created_at, "chunks": list(trace.chunks),
        "events": list(trace.events), "stored_content": trace.stored_content,
        "stored_metadata": dict(trace.stored_metadata),
    }


def trace_from_json(data: Any) -> Trace:
    """A Trace from a parsed trace file; TraceFormatError names the first problem."""
    if not isinstance(data, dict):
        raise TraceFormatError("a trace file holds one JSON object")
    if data.get("format") != TRACE_FORMAT:
        raise TraceFormatError(f"'format' must be {TRACE_FORMAT!r}")
    if data.get("version") != TRACE_VERSION:
        raise TraceFormatError(f"unsupported trace version {data.get('version')!r}")
    chunks, events = data.get("chunks"), data.get("events")
    if not isinstance(chunks, list) or not all(isinstance(c, str) for c in chunks):
        raise TraceFormatError("'chunks' must be a list of strings")
    if not isinstance(events, list) or not all(isinstance(e, dict) for e in events):
        raise TraceFormatError("'events' must be a list of objects")
    content, metadata = data.get("stored_content"), data.get("stored_metadata") or {}
    if not isinstance(content, str):
        raise TraceFormatError("'stored_content' must be a string")
    if not isinstance(metadata, dict):
        raise TraceFormatError("'stored_metadata' must be an object")
    return Trace(
        message_id=str(data.get("message_id")), thread_id=str(data.get("thread_id")),
        user_id=str(data.get("user_id")), model=_opt_str(data.get("model")),
        status=_opt_str(data.get("status")), chunks=chunks, events=events,
        created_at=_opt_str(data.get("created_at")), stored_content=content,
        stored_metadata=metadata,
    )


def _opt_str(value: Any) -> str | None:
    return None if value is None else str(value)


# -- replay ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReplayStep:
    """One feed (or the final close, `raw` None) and what came out of it."""

    index: int
    raw: str | None
    emitted: str
    warnings: list[FilterWarning]
    reasoning: str = ""
    """The reasoning this step made final (its field deltas' and the content's)."""
    tool_calls: tuple[ToolCall, ...] = ()
    """The inline calls whose block ended in this step."""


@dataclass(frozen=True)
class ReplayResult:
    steps: list[ReplayStep]
    content: str
    metadata: dict[str, Any]
    warnings: list[FilterWarning]
    matches: bool
    """The replayed text equals the stored content (and the reasoning the stored one)."""
    divergence: int | None
    """The first step whose output is not the stored content's continuation (None: none;
    len(steps) when the stored content is longer than the replay)."""
    reasoning: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    """The inline calls given out (none when the request offered no tools)."""


def replay(trace: Trace) -> ReplayResult:
    """Feed the chunks through a fresh ReasoningSplit (closing it if the gateway did), each
    cleaned first as the gateway does (app.core.cleaning), the reasoning deltas at their places."""
    split = ReasoningSplit(trace.reasoning_format, trace.reasoning_tag,
                           tool_format=trace.tool_format, tool_tag=trace.tool_tag,
                           tools_offered=trace.tools_offered)
    thoughts = trace.reasoning_chunks
    steps: list[ReplayStep] = []
    seen: list[FilterWarning] = []

    def step(index: int, raw: str | None, emitted: str, thought: str) -> None:
        new = [r for r in split.records if r not in seen]  # a few at most
        seen.extend(new)
        calls = split.new_tool_calls
        given = tuple(calls) if trace.tools_offered else ()
        calls.clear()
        steps.append(ReplayStep(index, raw, emitted, new, thought, given))

    t = 0
    for index, raw in enumerate(trace.chunks):
        thought = ""
        while t < len(thoughts) and thoughts[t][0] <= index:
            thought += split.feed_reasoning(clean_text(thoughts[t][1]))
            t += 1
        emitted = split.feed(clean_text(raw))
        step(index, raw, emitted, thought + split.take_reasoning())
    thought = "".join(split.feed_reasoning(clean_text(text)) for _, text in thoughts[t:])
    if trace.filter_closed:
        emitted = split.close()
        step(len(trace.chunks), None, emitted, thought + split.take_reasoning())
    elif thought:
        step(len(trace.chunks), None, "", thought)
    content = "".join(s.emitted for s in steps)
    reasoning = "".join(s.reasoning for s in steps)
    calls = tuple(call for s in steps for call in s.tool_calls)
    return ReplayResult(
        steps=steps, content=content, metadata=dict(split.metadata or {}),
        warnings=list(split.records),
        matches=(content == trace.stored_content and reasoning == trace.stored_reasoning
                 and list(calls) == trace.stored_tool_calls),
        divergence=_divergence(steps, trace.stored_content), reasoning=reasoning,
        tool_calls=calls,
    )


def _divergence(steps: list[ReplayStep], stored: str) -> int | None:
    position = 0
    for number, step in enumerate(steps):
        if not stored.startswith(step.emitted, position):
            return number
        position += len(step.emitted)
    return None if position == len(stored) else len(steps)
