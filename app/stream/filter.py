"""MarkerFilter: the one implementation of marker spec v1 (docs/markers.md).

The filter reads the model's output once, left to right, in whatever chunks it arrives,
and never takes back what it emitted. It keeps as little as the spec allows:

- plain text: only a possible header start at the very end (at most 30 characters);
- a header: the header itself, until its greedy white space and colon are settled;
- a body: nothing but the automaton (and, for METADATA, the body text for decoding);
- after a body: the white space and dashes that may still become a closer;
- after a broken body: the garble window, until `-->` is found or ruled out.

Text that becomes visible again (after an unclosed or unterminated block) is scanned
again from where it starts, as the spec's algorithm continues at a block's end; nothing
else is rescanned.
"""

from __future__ import annotations

from typing import Final, NamedTuple, Protocol

from app.stream import spec
from app.stream.decode import JsonObject, decode_object
from app.stream.json_prefix import COMPLETE, INVALID, JsonObjectPrefix
from app.stream.trimmed import TrimmedOutput

WS: Final = spec.WS

#: Below this length a chunk is checked for a stage's tag start (`<t`) with `in`; from it
#: on for the tag's rarest character and a cut tag at its end (a two-character needle
#: costs CPython's search about 1.7 ns a character, a one-character one memchr's speed).
_SHORT: Final = 32

# Where the scan is. The retained text `_buf` starts at the candidate (PLAIN), the
# header (HEADER) or the end of the body (CLOSER); BODY and GARBLE keep no `_buf`.
_PLAIN, _HEADER, _BODY, _CLOSER, _GARBLE = range(5)

# Warning names, as the spec spells them.
CONTEXT_ECHO: Final = "context_echo"
METADATA_AT_START: Final = "metadata_at_start"
UNCLOSED: Final = "unclosed_block"
GARBLED: Final = "garbled_block"
UNTERMINATED: Final = "unterminated_block"
TRUNCATED: Final = "truncated_block"
OVERSIZED: Final = "oversized_block"


class FilterWarning(NamedTuple):
    """One warning, located in the stream so a bad output can be found in the logs."""

    kind: str
    """The warning name (`context_echo`, `unclosed_block`, ...)."""
    marker: str
    """`METADATA` or `MSG_CONTEXT`: the block the warning is about."""
    chunk_index: int
    """0-based index of the chunk during which the block's header was recognised."""
    offset: int
    """Stream position (characters) of the block start, its `<`."""
    end: int
    """Stream position just after the block: where visible text resumes."""

    def log_fields(self) -> dict[str, object]:
        """The fields a `filter_warning` log line carries (observers such as the metrics and
        the stream tracer read `kind`)."""
        return {
            "kind": self.kind,
            "marker": self.marker,
            "chunk_index": self.chunk_index,
            "offset": self.offset,
            "end": self.end,
        }


class TextStage(Protocol):
    """What reads the filter's visible text after it (the inline tool call split): fed each
    piece the slow path emits, closed with the filter. While it is `idle`, text with no `<`
    would pass it unchanged, so the filter's hot path skips it for such chunks."""

    idle: bool
    chunk_index: int
    stream_pos: int
    #: The first two characters of anything the stage takes out (`<t` for `<tool_call>`).
    start: str
    #: A character anything the stage takes out holds, the rarest in prose (`_`).
    rare: str
    #: The proper prefixes of what the stage takes out: a piece may end in a cut one.
    prefixes: tuple[str, ...]

    def feed(self, text: str) -> str: ...

    def close(self) -> str: ...

    def passes(self, text: str, *, ws_follows: bool) -> bool:
        """Whether the stage may be skipped for `text`: fed, it would return it unchanged
        and stay idle, or (`ws_follows`: the filter holds WS that comes next) what it would
        hold of it cannot become a tag once that WS follows."""
        ...


class MarkerFilter(TrimmedOutput):
    """Feed the model's output chunk by chunk; get back the text safe to show so far."""

    __slots__ = (
        "_block_at_start",
        "_block_chunk",
        "_block_is_metadata",
        "_block_start",
        "_body_len",
        "_body_parts",
        "_buf",
        "_closed",
        "_closing",
        "_fast",
        "_json",
        "_oversized",
        "_state",
        "_then",
        "_win_len",
        "_win_parts",
        "_win_start",
        "_win_tail",
        "chars_fed",
        "chunks_fed",
        "metadata",
        "peak_buffered",
        "peak_held_back",
        "records",
        "warnings",
    )

    def __init__(self, *, continuing: bool = False, then: TextStage | None = None) -> None:
        """`continuing`: this output goes on from visible text another filter emitted (a
        call that finishes an answer broken off mid-answer): its leading white space is
        the answer's own, and a block at its start is not at the answer's start. `then`:
        a stage the visible text goes through before it is returned (app.stream.tools)."""
        self._then = then
        self.metadata: JsonObject | None = None
        """Merged objects of the complete METADATA blocks (later keys win), or None."""
        self.warnings: list[str] = []
        """Warning names in stream order."""
        self.records: list[FilterWarning] = []
        """The same warnings with their stream positions, for logs."""
        self.chunks_fed = 0
        self.chars_fed = 0
        self.peak_held_back = 0
        self.peak_buffered = 0
        self._fast = False  # PLAIN, nothing retained, visible text started, not closing
        self._started = False  # a visible non-WS character has been emitted
        self._ws: list[str] = []  # trailing WS run, emitted only if visible text follows
        self._state = _PLAIN
        self._buf = ""
        self._closing = False
        self._closed = False
        self._body_parts: list[str] = []  # METADATA body text, joined when it completes
        self._win_parts: list[str] = []  # garble window kept across chunks
        self._reset_block()
        if continuing:
            self._started = self._fast = True

    # ----------------------------------------------------------------- public API

    def feed(self, chunk: str) -> str:
        """Take the next chunk; return the visible text that is now final (maybe "")."""
        self.chunks_fed += 1
        self.chars_fed += len(chunk)
        if self._fast and ("<" not in chunk or (chunk[-1] != "<" and (
                "<!" not in chunk if (then := self._then) is None
                else "<!" not in chunk and (
                    then.start not in chunk if len(chunk) < _SHORT
                    else (then.rare not in chunk and not chunk.endswith(then.prefixes))
                    or then.passes(chunk, ws_follows=False))))):
            # The common case: ordinary text, nothing pending but maybe a WS run. A header
            # needs `<!--`; without `<!` and without `<` at the end, none starts here. An
            # idle stage after the filter (app.stream.tools) lets through what holds no
            # start of its tag, as it would (a `<` at the end may start one: not here);
            # a long chunk without the tag's rarest character and not ending in a cut tag
            # holds none either.
            text = chunk.rstrip(WS)
            if not text:
                if chunk:
                    self._ws.append(chunk)
                return ""
            ws = self._ws
            if ws:
                visible = "".join(ws) + text
                ws.clear()
            else:
                visible = text
            if len(text) != len(chunk):
                ws.append(chunk[len(text) :])
            return visible
        if self._closed:
            raise ValueError("MarkerFilter.feed() after close()")
        return self._feed_slow(chunk)

    def close(self) -> str:
        """End of stream: resolve what is held per the spec; return the last visible text."""
        if self._closed:
            return ""
        self._closing = True
        self._fast = False
        visible = self._feed_slow("")
        then = self._then
        if then is not None:
            then.chunk_index, then.stream_pos = self.chunks_fed - 1, self.chars_fed
            visible += then.close()
        self._ws.clear()  # trailing WS of the whole message is dropped
        self._closed = True
        return visible

    @property
    def held_back(self) -> int:
        """Characters fed whose fate is still open (not counting a trailing WS run)."""
        if self._state == _PLAIN or self._state == _CLOSER:
            return len(self._buf)
        if self._state == _GARBLE:
            return self._win_len
        return 0  # a header or body: removed, whatever happens next

    @property
    def buffered(self) -> int:
        """Characters kept in memory (held back, header, METADATA body; no WS run)."""
        body = self._body_len if self._body_parts else 0
        return len(self._buf) + body + (self._win_len if self._state == _GARBLE else 0)

    @property
    def pending_ws(self) -> int:
        """Length of the WS run held until visible text follows it."""
        return sum(map(len, self._ws))

    @property
    def in_block(self) -> bool:
        """True while inside a recognised marker block."""
        return self._state != _PLAIN

    # ----------------------------------------------------------------- the scan

    def _feed_slow(self, chunk: str) -> str:
        out: list[str] = []
        base = self.chars_fed - len(chunk)  # stream position of chunk[0]
        if self._state == _GARBLE:
            resumed = self._resume_window(chunk, base)
            if resumed is None:
                self._note_peaks()
                return ""
            buf, i, base = resumed
        else:
            buf, i = self._buf + chunk, 0
            base -= len(self._buf)
            self._buf = ""
        while i >= 0:
            state = self._state
            if state == _PLAIN:
                i = self._scan_plain(buf, i, base, out)
            elif state == _HEADER:
                i = self._scan_header(buf, i, base)
            elif state == _BODY:
                i = self._scan_body(buf, i, base)
            elif state == _CLOSER:
                i = self._scan_closer(buf, i, base)
            else:
                i = self._scan_window(buf, i, base)
        self._note_peaks()
        self._fast = self._state == _PLAIN and not self._buf and self._started and not self._closing
        then = self._then
        if then is None:
            return "".join(out)
        visible = "".join(out)
        if then.idle:
            if visible and "<" in visible and (
                    then.rare in visible or visible.endswith(then.prefixes)
            ) and not then.passes(visible, ws_follows=bool(self._ws)):
                # An idle stage returns a piece unchanged unless it holds all of its tag
                # (the tag's rarest character tells, in one memchr) or ends in a cut one:
                # only then is a call worth its cost.
                return self._through(then, visible)
            return visible
        if visible:
            return self._through(then, visible)
        self._fast = False
        return visible

    def _through(self, then: TextStage, visible: str) -> str:
        """Feed the stage; the hot path is open again only while it is idle."""
        then.chunk_index, then.stream_pos = self.chunks_fed - 1, self.chars_fed
        visible = then.feed(visible)
        self._fast = self._fast and then.idle
        return visible

    def _scan_plain(self, buf: str, i: int, base: int, out: list[str]) -> int:
        """Visible text up to the next header; holds back a possible header start."""
        j = buf.find("<!--", i)
        while j >= 0:
            start = spec.HEADER_START.match(buf, j)
            if start is not None:
                self._emit(buf[i:j], out)
                self._open_block(start.group("keyword").upper(), base + j)
                return j
            j = buf.find("<!--", j + 1)
        n = len(buf)
        if not self._closing:
            k = buf.rfind("<", max(i, n - spec.HEADER_START_PREFIX_MAX), n)
            if k >= 0 and spec.HEADER_START_PREFIX.match(buf, k) is not None:
                self._emit(buf[i:k], out)
                self._buf = buf[k:]
                return -1
        self._emit(buf[i:] if i else buf, out)
        return -1

    def _scan_header(self, buf: str, i: int, base: int) -> int:
        """Settle the header's greedy WS and colon; the body starts where it ends."""
        header = spec.HEADER.match(buf, i)
        assert header is not None  # HEADER_START matched here
        b = header.end()
        if b == len(buf) and not self._closing:
            self._buf = buf[i:]  # more WS or the colon may still follow
            return -1
        self._state = _BODY
        self._json = JsonObjectPrefix()
        return b

    def _scan_body(self, buf: str, i: int, base: int) -> int:
        """Run the JSON automaton over the body, up to MAX_BODY characters."""
        end = min(len(buf), i + spec.MAX_BODY - self._body_len)
        outcome, k = self._json.scan(buf, i, end)
        if outcome == INVALID:
            self._body_parts = []
            return self._open_window(k, base, oversized=False)
        if self._block_is_metadata:
            self._body_parts.append(buf[i:k])
        self._body_len += k - i
        if outcome == COMPLETE:
            if self._block_is_metadata:
                self._merge(decode_object("".join(self._body_parts)))
                self._body_parts = []
            self._state = _CLOSER
            return k
        if self._body_len >= spec.MAX_BODY:
            self._body_parts = []
            return self._open_window(k, base, oversized=True)
        if self._closing:
            self._end_block(base + k, TRUNCATED)
            return k
        return -1

    def _scan_closer(self, buf: str, q: int, base: int) -> int:
        """After a complete body: a closer ends the block, anything else leaves it unclosed."""
        closer = spec.CLOSER.match(buf, q)
        if closer is not None:
            self._end_block(base + closer.end(), None)
            return closer.end()
        if not self._closing and spec.CLOSER_PREFIX.match(buf, q) is not None:
            self._buf = buf[q:]
            return -1
        self._end_block(base + q, UNCLOSED)
        return q  # what follows the body is visible again

    def _open_window(self, p: int, base: int, *, oversized: bool) -> int:
        self._state = _GARBLE
        self._oversized = oversized
        self._win_start = base + p
        return p

    def _scan_window(self, buf: str, p: int, base: int) -> int:
        """Look for `-->` starting in T[p : p + GARBLE_WINDOW], all within buf if possible."""
        n = len(buf)
        g = buf.find(spec.CLOSER_END, p, p + spec.GARBLE_SPAN)
        if g >= 0:
            self._end_block(base + g + 3, OVERSIZED if self._oversized else GARBLED)
            return g + 3
        if n - p >= spec.GARBLE_SPAN or self._closing:
            self._end_block(base + p, OVERSIZED if self._oversized else UNTERMINATED)
            return p  # T[p:] is visible again
        self._win_parts = [buf[p:]]
        self._win_len = n - p
        self._win_tail = buf[max(p, n - 2) :]
        return -1

    def _resume_window(self, chunk: str, base: int) -> tuple[str, int, int] | None:
        """Continue a garble window kept from earlier chunks: (buf, index, base) or None."""
        need = spec.GARBLE_SPAN - self._win_len
        tail = self._win_tail
        probe = tail + chunk[:need]
        g = probe.find(spec.CLOSER_END)
        if g >= 0:
            end = g + 3 - len(tail)  # index in chunk just after the `-->`
            self._end_block(base + end, OVERSIZED if self._oversized else GARBLED)
            return chunk, end, base
        if len(chunk) >= need or self._closing:
            window = "".join(self._win_parts)
            start = self._win_start
            self._end_block(start, OVERSIZED if self._oversized else UNTERMINATED)
            return window + chunk, 0, start
        self._win_parts.append(chunk)
        self._win_len += len(chunk)
        self._win_tail = probe[-2:]
        return None

    # ----------------------------------------------------------------- blocks

    def _open_block(self, keyword: str, h: int) -> None:
        self._state = _HEADER
        self._block_start = h
        self._block_chunk = self.chunks_fed - 1
        self._block_is_metadata = keyword == spec.METADATA
        self._block_at_start = not self._started

    def _end_block(self, end: int, ending: str | None) -> None:
        marker = spec.METADATA if self._block_is_metadata else spec.MSG_CONTEXT
        kinds: list[str] = []
        if not self._block_is_metadata:
            kinds.append(CONTEXT_ECHO)
        elif self._block_at_start:
            kinds.append(METADATA_AT_START)
        if ending is not None:
            kinds.append(ending)
        for kind in kinds:
            self.warnings.append(kind)
            self.records.append(
                FilterWarning(kind, marker, self._block_chunk, self._block_start, end)
            )
        self._state = _PLAIN
        self._reset_block()

    def _reset_block(self) -> None:
        self._block_start = 0
        self._block_chunk = 0
        self._block_is_metadata = False
        self._block_at_start = False
        self._json = JsonObjectPrefix()
        self._body_len = 0
        self._body_parts = []
        self._oversized = False
        self._win_start = 0
        self._win_len = 0
        self._win_parts = []
        self._win_tail = ""

    def _merge(self, obj: JsonObject) -> None:
        if self.metadata is None:
            self.metadata = {}
        self.metadata.update(obj)

    def _note_peaks(self) -> None:
        held = self.held_back
        if held > self.peak_held_back:
            self.peak_held_back = held
        buffered = self.buffered
        if buffered > self.peak_buffered:
            self.peak_buffered = buffered
