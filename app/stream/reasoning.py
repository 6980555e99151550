"""ReasoningSplit: the one implementation of the marker spec's "Reasoning (v1.2)" section.

An answer has two channels: the content text T and the reasoning field text F (the
`reasoning_content` / `reasoning` deltas). The split finds T's leading `<think>` block and
sends it, after F, into the reasoning text R; the rest of T is the content. Each of R and the
content runs through its own MarkerFilter, so both are marker-safe in the same way:

    split = ReasoningSplit()                 # format `think`, tag `think`
    split.feed_reasoning(field_delta)        # -> reasoning text now final
    split.feed(content_delta)                # -> visible text now final (hot path:
                                             #    split.feeder.feed(content_delta))
    split.take_reasoning()                   # reasoning a content delta made final
    split.close()                            # end: last visible text (and take_reasoning())

What it holds, as the spec bounds it: before the split is decided, the leading WS and at
most len(`<think>`) - 1 characters (a prefix of the opener); inside inline reasoning, at
most len(`</think>`) - 1 (a prefix of the closer) besides what R's filter holds. Once the
first non-WS character of T cannot start the opener, T goes straight to the content filter
and nothing more is held for reasoning; from then on `split.feeder` is the content filter
itself, so a plain answer fed through it pays one attribute read per chunk for the split.

R is F followed by the inline reasoning. In a real stream the field deltas come before the
content (a server either parses the thinking into the field or leaves it inline), so that
order is what R's filter sees. A field delta that arrives after inline reasoning started is
appended where it arrives: reasoning pieces are joined in arrival order, never reordered or
taken back (prefix and streamed = stored hold for both channels; only the one-shot form's
R = F + inline then differs from what streamed, and it cannot happen with one chunk each).
"""

from __future__ import annotations

from typing import Final, Literal, NamedTuple

from app.stream import spec
from app.stream.decode import JsonObject
from app.stream.filter import FilterWarning, MarkerFilter
from app.stream.tools import ToolCall, ToolCallSplit, ToolFormat, valid_tag

ReasoningFormat = Literal["think", "think-prefilled", "none"]
REASONING_FORMATS: Final[tuple[ReasoningFormat, ...]] = ("think", "think-prefilled", "none")

MARKERS_IN_REASONING: Final = "markers_in_reasoning"
REASONING_UNCLOSED: Final = "reasoning_unclosed"

#: The `marker` of a FilterWarning about the reasoning rather than one marker block.
REASONING_MARKER: Final = "reasoning"

# Where the content channel is.
_LEAD, _INLINE, _CONTENT = range(3)

WS: Final = spec.WS

#: The calls of a split without the tool format: never filled.
_NO_CALLS: Final[list[ToolCall]] = []


class ReasoningSplit:
    """Feed both channels of one answer; get back the reasoning and the visible text."""

    __slots__ = (
        "_closed",
        "_closer",
        "_content",
        "_head",
        "_opener",
        "_prefilled",
        "_reasoning",
        "_reasoning_records",
        "_state",
        "_tail",
        "_tools",
        "feeder",
        "pending",
        "unclosed",
    )

    feeder: ReasoningSplit | MarkerFilter
    """What to feed the content channel to, for a caller on the hot path: this split until T
    is known to be all content, then the content MarkerFilter itself. A plain answer then
    pays one attribute read per chunk for the split, not a call: `split.feeder.feed(chunk)`
    is `split.feed(chunk)`, minus the delegation. Only the split itself makes reasoning
    final (`pending`), so a caller that fed the content filter has none to take."""

    def __init__(self, reasoning_format: ReasoningFormat = "think", tag: str = "think", *,
                 continuing: bool = False, tool_format: ToolFormat = "none",
                 tool_tag: str = "tool_call", tools_offered: bool = True) -> None:
        """`continuing`: the output goes on from answer text another split showed (a call
        that finishes an answer broken off mid-answer): its thinking is over, its content
        channel continues that text (MarkerFilter's `continuing`). `tool_format` `hermes`:
        the content's visible text goes through a ToolCallSplit (`tool_tag`; `tools_offered`
        says whether the request offered tools, app.stream.tools)."""
        if reasoning_format not in REASONING_FORMATS:
            raise ValueError(f"unknown reasoning format {reasoning_format!r}")
        if not valid_tag(tag):
            raise ValueError(f"bad reasoning tag {tag!r}")
        if tool_format not in ("none", "hermes"):
            raise ValueError(f"unknown tool format {tool_format!r}")
        self._opener = f"<{tag}>"
        self._closer = f"</{tag}>"
        self._prefilled = reasoning_format == "think-prefilled"
        self._state = _CONTENT if reasoning_format == "none" or continuing else _LEAD
        self._tools = (ToolCallSplit(tool_tag, offered=tools_offered, continuing=continuing)
                       if tool_format == "hermes" else None)
        self._content = MarkerFilter(continuing=continuing, then=self._tools)
        self.feeder = self._content if self._state == _CONTENT else self
        self._reasoning = MarkerFilter()
        self._head = ""  # LEAD: T so far (leading WS and a possible opener prefix)
        self._tail = ""  # INLINE: a possible closer prefix at the end of the reasoning
        #: Reasoning made final by a content feed, not taken yet (a list: cheap to test).
        self.pending: list[str] = []
        self._reasoning_records: list[FilterWarning] = []
        self._closed = False
        #: The inline reasoning never closed (known at close()).
        self.unclosed = False

    # ----------------------------------------------------------------- feeding

    def feed(self, chunk: str) -> str:
        """The next piece of the content channel T; returns the visible text now final.
        Reasoning it made final waits in `pending` (take it with take_reasoning())."""
        if self._state == _CONTENT:
            return self._content.feed(chunk)
        if self._closed:
            raise ValueError("ReasoningSplit.feed() after close()")
        if self._state == _LEAD:
            return self._lead(self._head + chunk, closing=False)
        return self._inline(self._tail + chunk, closing=False)

    def feed_reasoning(self, chunk: str) -> str:
        """The next reasoning field delta; returns the reasoning text now final (with any
        reasoning a content feed made final before it, in order)."""
        if self._closed:
            raise ValueError("ReasoningSplit.feed_reasoning() after close()")
        self._to_reasoning(chunk)
        return self.take_reasoning()

    def close(self) -> str:
        """End of both channels: resolve what is held per the spec; returns the last visible
        text (the last reasoning waits in take_reasoning())."""
        if self._closed:
            return ""
        if self._state == _LEAD:
            visible = self._lead(self._head, closing=True)
        elif self._state == _INLINE:
            visible = self._inline(self._tail, closing=True)
        else:
            visible = ""
        self._closed = True
        self.feeder = self._content  # no longer itself: no reference cycle is left
        final = self._reasoning.close()
        if final:
            self.pending.append(final)
        self._note_reasoning_markers()
        if self.unclosed:
            end = self._content.chars_fed  # nothing was fed to it: 0
            self._reasoning_records.append(
                FilterWarning(REASONING_UNCLOSED, REASONING_MARKER, 0, end, end))
        return visible + self._content.close()

    def take_reasoning(self) -> str:
        """The reasoning made final since the last call (maybe "")."""
        out = self.pending
        if not out:
            return ""
        text = out[0] if len(out) == 1 else "".join(out)
        out.clear()
        return text

    # ----------------------------------------------------------------- the split

    def _lead(self, head: str, *, closing: bool) -> str:
        """Before the split is decided: hold leading WS and a possible opener prefix."""
        rest = head.lstrip(WS)
        opener = self._opener
        if rest.startswith(opener):
            self._head = ""
            self._state = _INLINE
            return self._inline(rest[len(opener):], closing=closing)
        if not closing and (not rest or opener.startswith(rest)):
            self._head = head
            return ""
        self._head = ""
        if self._prefilled:  # the model began inside its thinking: reasoning from 0
            self._state = _INLINE
            return self._inline(head, closing=closing)
        self._to_content()
        return self._content.feed(head)

    def _inline(self, text: str, *, closing: bool) -> str:
        """Inside the leading reasoning block: up to the first closer, the rest is content."""
        closer = self._closer
        k = text.find(closer)
        if k >= 0:
            self._tail = ""
            self._to_reasoning(text[:k])
            self._to_content()
            return self._content.feed(text[k + len(closer):])
        keep = 0 if closing else _closer_prefix_at_end(text, closer)
        if keep:
            self._tail = text[-keep:]
            text = text[:-keep]
        else:
            self._tail = ""
        self._to_reasoning(text)
        if closing:
            self.unclosed = True
        return ""

    def _to_content(self) -> None:
        self._state = _CONTENT
        self.feeder = self._content

    def _to_reasoning(self, text: str) -> None:
        if text:
            piece = self._reasoning.feed(text)
            if piece:
                self.pending.append(piece)
            if not self._reasoning_records:
                self._note_reasoning_markers()

    def _note_reasoning_markers(self) -> None:
        """`markers_in_reasoning`, once, as soon as R's filter has seen a header."""
        rf = self._reasoning
        if self._reasoning_records or not (rf.in_block or rf.records or rf.metadata is not None):
            return
        first = rf.records[0] if rf.records else None
        offset = first.offset if first is not None else rf.chars_fed
        self._reasoning_records.append(FilterWarning(
            MARKERS_IN_REASONING, REASONING_MARKER, rf.chunks_fed - 1, offset, offset))

    # ----------------------------------------------------------------- results

    @property
    def metadata(self) -> JsonObject | None:
        """The answer's METADATA: the content's only (R's is discarded)."""
        return self._content.metadata

    @property
    def reasoning_records(self) -> list[FilterWarning]:
        """`markers_in_reasoning` then `reasoning_unclosed`, as far as known."""
        return self._reasoning_records

    @property
    def content_records(self) -> list[FilterWarning]:
        return self._content.records

    @property
    def tool_records(self) -> list[FilterWarning]:
        """The inline tool calls' warnings so far (none without the `hermes` format)."""
        return self._tools.records if self._tools is not None else []

    @property
    def records(self) -> list[FilterWarning]:
        """Every warning in the spec's order: the reasoning's, the content's, the calls'."""
        return [*self._reasoning_records, *self._content.records, *self.tool_records]

    @property
    def warnings(self) -> list[str]:
        return ([record.kind for record in self._reasoning_records] + self._content.warnings
                + [record.kind for record in self.tool_records])

    @property
    def tool_calls(self) -> list[ToolCall]:
        """Every inline tool call so far, in order (none without the `hermes` format)."""
        return self._tools.calls if self._tools is not None else []

    @property
    def new_tool_calls(self) -> list[ToolCall]:
        """The calls whose block ended and that nobody took yet: the list itself, which the
        taker empties (an always-empty list without the `hermes` format)."""
        return self._tools.pending if self._tools is not None else _NO_CALLS

    @property
    def tool_split(self) -> ToolCallSplit | None:
        return self._tools

    @property
    def decided(self) -> bool:
        """The leading block is settled: T is content from here on (or reasoning is open)."""
        return self._state != _LEAD

    @property
    def in_reasoning(self) -> bool:
        """Inside the leading reasoning block of T."""
        return self._state == _INLINE

    @property
    def held_back(self) -> int:
        """Characters of T fed whose channel or fate is still open, not counting leading WS
        before the decision nor the filters' trailing WS runs."""
        if self._state == _LEAD:
            return len(self._head.lstrip(WS))
        if self._state == _INLINE:
            return len(self._tail) + self._reasoning.held_back
        tools = self._tools.held_back if self._tools is not None else 0
        return self._content.held_back + tools

    @property
    def content_filter(self) -> MarkerFilter:
        return self._content

    @property
    def reasoning_filter(self) -> MarkerFilter:
        return self._reasoning


def _closer_prefix_at_end(text: str, closer: str) -> int:
    """Length of the proper prefix of `closer` that ends `text` (0 if none). The closer's
    only `<` is its first character, so only the last `<` of the text can begin one."""
    k = text.rfind("<", max(0, len(text) - len(closer) + 1))
    return len(text) - k if k >= 0 and closer.startswith(text[k:]) else 0


class SplitResult(NamedTuple):
    """What the split makes of a whole answer (both channels)."""

    text: str
    reasoning: str
    metadata: JsonObject | None
    warnings: list[str]
    records: list[FilterWarning]
    tool_calls: tuple[ToolCall, ...] = ()


def split_reasoning(
    text: str, reasoning_field: str = "", *, reasoning_format: ReasoningFormat = "think",
    tag: str = "think", tool_format: ToolFormat = "none", tool_tag: str = "tool_call",
) -> SplitResult:
    """Split a whole answer at once (stored or replayed text): the same ReasoningSplit, the
    field text fed first (R = F followed by the inline reasoning), then the content."""
    split = ReasoningSplit(reasoning_format, tag, tool_format=tool_format, tool_tag=tool_tag)
    reasoning = split.feed_reasoning(reasoning_field) if reasoning_field else ""
    visible = split.feed(text) + split.close()
    reasoning += split.take_reasoning()
    return SplitResult(visible, reasoning, split.metadata, split.warnings, split.records,
                       tuple(split.tool_calls))
