"""One streamed answer: upstream chunks in, clean deltas out, and at the end the content to
store, which is exactly the concatenation of the deltas, whatever ends the stream.

    answer = AnswerStream()
    for chunk in chunks:                  # UpstreamChunk
        delta = answer.feed(chunk)        # Delta | None
    last = answer.end()                   # or answer.fail(failure); nothing when the client left
    answer.content == "".join(every delta's text)

Each raw chunk is cleaned the way the store cleans (NUL removed, lone surrogates replaced)
*before* the MarkerFilter: what a client sees stays what is stored, a lone surrogate cannot
break the UTF-8 of an event stream, and a NUL removed later could not join the pieces of a
marker the filter let pass. Cleaning is per character, so cleaning each chunk equals
cleaning the whole output."""

from __future__ import annotations

from app.records import FinalStatus
from app.sanitize import SanitizeReport, clean_text
from app.stream import FilterWarning, JsonObject, MarkerFilter
from app.turns.events import Delta, TurnFailure
from app.turns.inputs import ProviderUsage, UpstreamChunk

#: The warning of an answer another call finished after its first call failed mid-answer.
CONTINUED = "continued_after_failure"


class AnswerStream:
    """The state of one answer. `status` starts `interrupted`: an answer nobody ended (the
    client left, the task was cancelled) is stored as such, with only what was sent."""

    def __init__(self, *, keep_raw: bool = False) -> None:
        self._filter = MarkerFilter()
        self._parts: list[str] = []
        self._warnings_taken = 0
        self.sanitized = SanitizeReport()
        self.status: FinalStatus = "interrupted"
        self.failure: TurnFailure | None = None
        self.model: str | None = None
        self.finish_reason: str | None = None
        self.usage: ProviderUsage | None = None
        #: Chunks that carried answer text.
        self.text_chunks = 0
        #: UTF-8 size of the raw answer text: the completion estimate when no usage came.
        self.raw_bytes = 0
        #: The raw chunks themselves, only when asked for (stream traces replay them).
        self.raw_chunks: list[str] | None = [] if keep_raw else None
        self.filter_closed = False
        #: The filters of the calls before a continuation (app.turns.continuation), whose
        #: metadata and warnings the answer keeps.
        self._earlier: list[MarkerFilter] = []

    def feed(self, chunk: UpstreamChunk) -> Delta | None:
        """One upstream chunk; returns the clean text that became safe to show, if any."""
        self.model = chunk.model or self.model
        self.finish_reason = chunk.finish_reason or self.finish_reason
        if chunk.usage is not None:
            self.usage = chunk.usage
        raw = chunk.text
        if not raw:
            return None
        self.text_chunks += 1
        self.raw_bytes += len(raw.encode("utf-8", "surrogatepass"))
        if self.raw_chunks is not None:
            self.raw_chunks.append(raw)
        return self._delta(self._filter.feed(clean_text(raw, self.sanitized)))

    def end(self) -> Delta | None:
        """The model server finished the answer: resolve what the filter holds."""
        self.status = "complete"
        return self._close()

    def fail(self, failure: TurnFailure, *, flush: bool) -> Delta | None:
        """The answer failed. `flush`: the stream had been opened, so what the filter holds
        is resolved as at a normal end (the text before a failure is real answer text)."""
        self.status = "failed"
        self.failure = failure
        return self._close() if flush else None

    def can_continue(self) -> bool:
        return True

    def said(self) -> str:
        return self.content

    def reopen(self) -> None:
        """A continuation's chunks follow a failed call (`fail` without a flush). What that
        call's filter still held was never said and is dropped with it: the continuation,
        asked to go on from what was said, writes it again through a fresh filter whose
        text is appended. The new call's usage and model are its own."""
        self.take_warnings()
        self._earlier.append(self._filter)
        self._filter = MarkerFilter(continuing=bool(self._parts))
        self._warnings_taken = 0
        self.status, self.failure, self.filter_closed = "interrupted", None, False
        self.usage, self.model, self.finish_reason, self.raw_bytes = None, None, None, 0

    @property
    def content(self) -> str:
        return "".join(self._parts)

    @property
    def metadata(self) -> JsonObject | None:
        """The merged METADATA objects of the answer so far, or None."""
        if not self._earlier:
            return self._filter.metadata
        merged: JsonObject = {}
        for one in (*self._earlier, self._filter):
            merged.update(one.metadata or {})
        return merged or None

    @property
    def warning_names(self) -> list[str]:
        names = [n for one in self._earlier for n in (*one.warnings, CONTINUED)]
        return names + list(self._filter.warnings)

    @property
    def warnings(self) -> list[FilterWarning]:
        return [r for one in (*self._earlier, self._filter) for r in one.records]

    def take_warnings(self) -> list[FilterWarning]:
        """The warnings raised since the last call (each is reported once)."""
        records = self._filter.records
        new = records[self._warnings_taken:]
        self._warnings_taken = len(records)
        return new

    def _close(self) -> Delta | None:
        if self.filter_closed:
            return None
        self.filter_closed = True
        return self._delta(self._filter.close())

    def _delta(self, text: str) -> Delta | None:
        if not text:
            return None
        self._parts.append(text)
        return Delta(text, len(self._parts))
