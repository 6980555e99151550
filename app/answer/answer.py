"""One streamed answer: upstream chunks in, clean deltas out, and at the end the content to
store, which is exactly the concatenation of the deltas, whatever ends the stream.

    answer = AnswerStream()
    for chunk in chunks:                  # UpstreamChunk
        out = answer.feed(chunk)          # Delta | Reasoning | (Reasoning, Delta) | None
    last = answer.end()                   # or answer.fail(failure); nothing when the client left
    answer.content == "".join(every delta's text)
    answer.reasoning == "".join(every reasoning event's text)

Both channels go through the one reasoning split (app.stream.reasoning): the chunk's
reasoning field first, then its text (R is the field followed by the inline thinking). Delta
and Reasoning events share one `seq` counter, so a client resuming after event N gets both
channels from there on. With a tool format set, the split also takes the calls a model wrote
inline out of the text (app.stream.tools): `take_tool_calls()` gives each once its block
ended, when the request offered tools (a request that did not gets the text alone, and the
warning `tool_call_unrequested`).

Each raw chunk is cleaned the way the store cleans (NUL removed, lone surrogates replaced)
*before* the MarkerFilter: what a client sees stays what is stored, a lone surrogate cannot
break the UTF-8 of an event stream, and a NUL removed later could not join the pieces of a
marker the filter let pass. Cleaning is per character, so cleaning each chunk equals
cleaning the whole output."""

from __future__ import annotations

import datetime as dt

from app.answer.events import AnswerOut, Delta, Reasoning, TurnFailure
from app.answer.inputs import ProviderUsage, UpstreamChunk
from app.answer.records import FinalStatus
from app.core.cleaning import SanitizeReport, clean_text
from app.core.clock import Clock, utcnow
from app.stream import (
    FilterWarning,
    JsonObject,
    ReasoningFormat,
    ReasoningSplit,
    ToolCall,
    ToolFormat,
)

#: The warning of an answer another call finished after its first call failed mid-answer.
CONTINUED = "continued_after_failure"


class AnswerStream:
    """The state of one answer. `status` starts `interrupted`: an answer nobody ended (the
    client left, the task was cancelled) is stored as such, with only what was sent."""

    def __init__(self, *, keep_raw: bool = False, reasoning_format: ReasoningFormat = "think",
                 reasoning_tag: str = "think", clock: Clock = utcnow,
                 tool_format: ToolFormat = "none", tool_tag: str = "tool_call",
                 tools_offered: bool = False) -> None:
        #: The reasoning format and tag the split runs with (a trace replays with them).
        self.reasoning_format, self.reasoning_tag = reasoning_format, reasoning_tag
        #: The inline tool call format and tag, and whether the request offered tools.
        self.tool_format, self.tool_tag, self.tools_offered = (tool_format, tool_tag,
                                                               tools_offered)
        self._split = self._new_split(continuing=False)
        #: The inline calls whose block ended, not taken yet (the split's own list: a cheap
        #: test per chunk; take them with take_tool_calls()).
        self.calls_waiting = self._split.new_tool_calls
        self._tools_taken = 0
        self._parts: list[str] = []
        self._thoughts: list[str] = []
        self._seq = 0
        self._clock = clock
        self._thinking_from: dt.datetime | None = None
        self._thinking_ms: int | None = None
        self._content_taken = 0
        self._reasoning_taken = 0
        self.sanitized = SanitizeReport()
        self.status: FinalStatus = "interrupted"
        self.failure: TurnFailure | None = None
        self.model: str | None = None
        self.finish_reason: str | None = None
        self.usage: ProviderUsage | None = None
        #: Chunks that carried answer text.
        self.text_chunks = 0
        #: UTF-8 size of the raw answer and reasoning text: the completion estimate when no
        #: usage came (thinking is completion tokens too).
        self.raw_bytes = 0
        #: The raw chunks themselves, only when asked for (stream traces replay them).
        self.raw_chunks: list[str] | None = [] if keep_raw else None
        #: The raw reasoning field deltas, likewise, each with its place: how many raw
        #: content chunks came before it (a replay feeds both channels in their order).
        self.raw_reasoning: list[tuple[int, str]] | None = [] if keep_raw else None
        self.filter_closed = False
        #: The splits of the calls before a continuation (app.answer.continuation), whose
        #: metadata and warnings the answer keeps.
        self._earlier: list[ReasoningSplit] = []

    def feed(self, chunk: UpstreamChunk) -> AnswerOut | None:
        """One upstream chunk; returns the clean reasoning and text that became safe to show,
        if any."""
        self.model = chunk.model or self.model
        self.finish_reason = chunk.finish_reason or self.finish_reason
        if chunk.usage is not None:
            self.usage = chunk.usage
        split = self._split
        thought = self._feed_reasoning(chunk.reasoning) if chunk.reasoning else ""
        raw = chunk.text
        if not raw:
            return self._reasoning(thought) if thought else None
        self.text_chunks += 1
        self.raw_bytes += len(raw.encode("utf-8", "surrogatepass"))
        if self.raw_chunks is not None:
            self.raw_chunks.append(raw)
        feeder = split.feeder  # the content filter itself once the answer is known plain
        text = feeder.feed(clean_text(raw, self.sanitized))
        if feeder is split or thought:  # only the split itself makes reasoning final
            return self._both(thought + split.take_reasoning(), text)
        return self._delta(text)

    def end(self) -> AnswerOut | None:
        """The model server finished the answer: resolve what the filter holds."""
        self.status = "complete"
        return self._close()

    def fail(self, failure: TurnFailure, *, flush: bool) -> AnswerOut | None:
        """The answer failed. `flush`: the stream had been opened, so what the filter holds
        is resolved as at a normal end (the text before a failure is real answer text)."""
        self.status = "failed"
        self.failure = failure
        if not flush:
            self._stop_thinking()
        return self._close() if flush else None

    def can_continue(self) -> bool:
        return True

    def said(self) -> str:
        return self.content

    def reopen(self) -> None:
        """A continuation's chunks follow a failed call (`fail` without a flush). What that
        call's split still held was never said and is dropped with it: the continuation,
        asked to go on from what was said, writes it again through a fresh split whose text
        is appended (continuing the answer's text when some was said: no second thinking
        phase, leading white space kept). The new call's usage and model are its own."""
        self.take_warnings()
        self._earlier.append(self._split)
        self._split = self._new_split(continuing=bool(self._parts))
        self.calls_waiting = self._split.new_tool_calls
        self._content_taken = self._reasoning_taken = self._tools_taken = 0
        self.status, self.failure, self.filter_closed = "interrupted", None, False
        self.usage, self.model, self.finish_reason, self.raw_bytes = None, None, None, 0

    def take_tool_calls(self) -> list[ToolCall]:
        """The inline calls whose block ended since the last call, when the request offered
        tools (else none: the text alone goes out)."""
        pending = self.calls_waiting
        if not pending:
            return []
        calls = list(pending) if self.tools_offered else []
        pending.clear()
        return calls

    def _new_split(self, *, continuing: bool) -> ReasoningSplit:
        return ReasoningSplit(self.reasoning_format, self.reasoning_tag, continuing=continuing,
                              tool_format=self.tool_format, tool_tag=self.tool_tag,
                              tools_offered=self.tools_offered)

    def carry_on(self, said: str, reasoning: str | None = None,
                 reasoning_ms: int | None = None) -> None:
        """Before the first chunk: this answer finishes one stored earlier (Continue on an
        answer cut at its token limit or interrupted). Its text and thinking start this one,
        the split continues that text as after a mid-answer failure, and only the new text
        is sent as deltas."""
        if said:
            self._parts.append(said)
            self._split = self._new_split(continuing=True)
        if reasoning:
            self._thoughts.append(reasoning)
            self._thinking_ms = reasoning_ms or 0

    @property
    def content(self) -> str:
        return "".join(self._parts)

    @property
    def tool_calls(self) -> list[ToolCall]:
        """Every inline call given out so far (none when the request offered no tools)."""
        if not self.tools_offered:
            return []
        return [call for one in (*self._earlier, self._split) for call in one.tool_calls]

    @property
    def reasoning(self) -> str:
        """All the reasoning shown so far, joined (what is stored apart from the content)."""
        return "".join(self._thoughts)

    @property
    def reasoning_ms(self) -> int | None:
        """Thinking time: from the first reasoning shown to the first answer text shown (or
        to the end when no text came; while still thinking, until now). None: no reasoning."""
        if self._thinking_ms is not None or self._thinking_from is None:
            return self._thinking_ms
        return self._ms_since(self._thinking_from)

    @property
    def metadata(self) -> JsonObject | None:
        """The merged METADATA objects of the answer so far, or None."""
        if not self._earlier:
            return self._split.metadata
        merged: JsonObject = {}
        for one in (*self._earlier, self._split):
            merged.update(one.metadata or {})
        return merged or None

    @property
    def warning_names(self) -> list[str]:
        names = [n for one in self._earlier for n in (*one.warnings, CONTINUED)]
        return names + self._split.warnings

    @property
    def warnings(self) -> list[FilterWarning]:
        return [r for one in (*self._earlier, self._split) for r in one.records]

    def take_warnings(self) -> list[FilterWarning]:
        """The warnings raised since the last call (each is reported once)."""
        split = self._split
        content, reasoning = split.content_records, split.reasoning_records
        tools = split.tool_records
        if (len(content) == self._content_taken and len(reasoning) == self._reasoning_taken
                and len(tools) == self._tools_taken):
            return []
        new = (reasoning[self._reasoning_taken:] + content[self._content_taken:]
               + tools[self._tools_taken:])
        self._content_taken, self._reasoning_taken = len(content), len(reasoning)
        self._tools_taken = len(tools)
        return new

    def _feed_reasoning(self, raw: str) -> str:
        self.raw_bytes += len(raw.encode("utf-8", "surrogatepass"))
        if self.raw_reasoning is not None:
            self.raw_reasoning.append((self.text_chunks, raw))
        return self._split.feed_reasoning(clean_text(raw, self.sanitized))

    def _close(self) -> AnswerOut | None:
        if self.filter_closed:
            return None
        self.filter_closed = True
        split = self._split
        text = split.close()
        out = self._both(split.take_reasoning(), text)
        self._stop_thinking()
        return out

    def _both(self, thought: str, text: str) -> AnswerOut | None:
        reasoning = self._reasoning(thought) if thought else None
        delta = self._delta(text)
        if reasoning is None:
            return delta
        return reasoning if delta is None else (reasoning, delta)

    def _reasoning(self, text: str) -> Reasoning:
        if self._thinking_from is None:
            self._thinking_from = self._clock()
        self._thoughts.append(text)
        self._seq += 1
        return Reasoning(text, self._seq)

    def _delta(self, text: str) -> Delta | None:
        if not text:
            return None
        if self._thinking_from is not None and self._thinking_ms is None:
            self._stop_thinking()
        self._parts.append(text)
        self._seq += 1
        return Delta(text, self._seq)

    def _stop_thinking(self) -> None:
        """The thinking is over (text came, or the answer ended): its time is fixed."""
        if self._thinking_from is not None and self._thinking_ms is None:
            self._thinking_ms = self._ms_since(self._thinking_from)

    def _ms_since(self, moment: dt.datetime) -> int:
        return max(0, round((self._clock() - moment).total_seconds() * 1000))
