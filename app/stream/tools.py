"""ToolCallSplit: the one implementation of the marker spec's "Inline tool calls" section.

Models such as Hermes and Qwen write a tool call into their answer:
`<tool_call>{"name": "get_weather", "arguments": {"city": "Prague"}}</tool_call>`. With the
tool format `hermes` the content's MarkerFilter hands its visible text V to this split (its
`then` stage), which turns each such block into a ToolCall and keeps the rest visible:

    split = ToolCallSplit()        # tag `tool_call`
    split.feed(visible_piece)      # -> text now final; calls whose block ended: `pending`
    split.close()                  # end: last text (and the last calls)

Why a stage after the marker filter rather than a filter of its own: the spec reads the
calls in V, so a marker inside the arguments is gone before the call is read, and the
marker filter's hot path (chunks without `<`) stays one test: while this split is `idle`
(plain text, nothing held) the marker filter may pass such chunks straight on.

What it holds, as the spec bounds it: in plain text a possible opener prefix (at most
len(opener) - 1 characters); after an opener, the opener and up to 16 WS until the body
starts or cannot; inside a body, the block so far (at most the opener, 16 WS and MAX_BODY);
after a call's body, up to 16 WS and a prefix of the closer. A block that is not a call
becomes plain text again from just after its opener, which is scanned again, as the spec's
scan continues there.
"""

from __future__ import annotations

import functools
import json
import re
from typing import Final, Literal, NamedTuple

from app.stream import spec
from app.stream.filter import FilterWarning
from app.stream.json_prefix import COMPLETE, INVALID, JsonObjectPrefix
from app.stream.trimmed import TrimmedOutput

ToolFormat = Literal["none", "hermes"]
TOOL_FORMATS: Final[tuple[ToolFormat, ...]] = ("none", "hermes")

TOOL_CALL_TRUNCATED: Final = "tool_call_truncated"
TOOL_CALL_INVALID: Final = "tool_call_invalid"
TOOL_CALL_UNCLOSED: Final = "tool_call_unclosed"
TOOL_CALL_UNREQUESTED: Final = "tool_call_unrequested"

#: The `marker` of a FilterWarning about an inline tool call.
TOOL_MARKER: Final = "tool_call"

#: White space allowed after an opener and before a closer.
GAP: Final = 16

WS: Final = spec.WS

# Where the scan is. PLAIN keeps at most an opener prefix in `_buf`; OPENED and BODY keep
# the block from its opener in `_parts`; CLOSER keeps what follows a call's body in `_parts`;
# DONE: a truncated call ended the text, nothing more is visible.
_PLAIN, _OPENED, _BODY, _CLOSER, _DONE = range(5)

#: One token of a valid JSON text after optional WS: a string, an opening bracket, a closing
#: one, `:` or `,`, or a number or literal.
_TOKEN = re.compile(
    r'[ \t\r\n]*(?:("(?:[^"\\]|\\.)*")|([{\[])|([}\]])|([:,])|([^ \t\r\n{}\[\]:,"]+))')


class ToolCall(NamedTuple):
    """One call as the model wrote it: the function's name and its arguments as text."""

    name: str
    arguments: str


def valid_tag(tag: str) -> bool:
    """A tag name the split can match exactly: letters, digits, `-` and `_`."""
    return bool(tag) and all(c.isascii() and (c.isalnum() or c in "-_") for c in tag)


class ToolCallSplit(TrimmedOutput):
    """Feed the content's visible text piece by piece; get back the text with no calls."""

    __slots__ = (
        "_body_len",
        "_buf",
        "_call",
        "_closer",
        "_closer_at",
        "_closer_so_far",
        "_closing",
        "_gap",
        "_json",
        "_offered",
        "_opened_at",
        "_opener",
        "_parts",
        "_state",
        "calls",
        "chunk_index",
        "idle",
        "pending",
        "prefixes",
        "rare",
        "records",
        "start",
        "stream_pos",
        "warnings",
    )

    def __init__(self, tag: str = "tool_call", *, offered: bool = True,
                 continuing: bool = False) -> None:
        """`offered`: the request offered tools; when not, a call is still taken out of the
        text but the warning `tool_call_unrequested` says so (once). `continuing`: the text
        goes on from visible text another split emitted (its leading WS is the answer's)."""
        tag_text = _tag_text(tag)
        self._opener = tag_text.opener
        self._closer = tag_text.closer
        self._closer_at = tag_text.closer_at
        self._closer_so_far = tag_text.closer_so_far
        #: What text must hold for an opener to start in it (besides a `<` at its end).
        self.start = tag_text.opener[:2]
        #: The tag's rarest character in prose: text without it holds no opener.
        self.rare = tag_text.rare
        #: Every proper prefix of the opener: a piece ending in one may end in a cut opener.
        self.prefixes = tag_text.prefixes
        self._offered = offered
        self._state = _PLAIN
        self._buf = ""
        self._parts: list[str] = []
        self._gap = 0  # WS read after the opener
        self._body_len = 0
        self._json = JsonObjectPrefix()
        self._call: ToolCall | None = None  # CLOSER: the call whose block is ending
        self._closing = False
        self._started = continuing
        self._ws: list[str] = []  # trailing WS run, emitted only if visible text follows
        self._opened_at = (0, 0)
        #: Every call so far, in order.
        self.calls: list[ToolCall] = []
        #: Calls whose block ended since the caller last emptied this list.
        self.pending: list[ToolCall] = []
        self.warnings: list[str] = []
        self.records: list[FilterWarning] = []
        #: Where the content stream is (set by the feeding MarkerFilter, for the records).
        self.chunk_index = 0
        self.stream_pos = 0
        #: Plain text, nothing held, visible text started: text without `<` passes as is.
        self.idle = continuing

    # ----------------------------------------------------------------- public API

    def feed(self, text: str) -> str:
        """The next piece of V; returns the text now final (maybe "")."""
        if self._state == _DONE:
            return ""
        out: list[str] = []
        self._run(text, out)
        self.idle = (self._state == _PLAIN and not self._buf and not self._ws
                     and self._started)
        return "".join(out)

    def passes(self, text: str, *, ws_follows: bool = False) -> bool:
        """Whether the idle split may be skipped for `text` (a piece of V that does not end
        in WS, as the marker filter emits it): it holds no opener, and no opener prefix at
        its end, or V goes on with WS there (`ws_follows`: the filter holds a WS run), so
        the prefix cannot grow into one. Cheaper than the feed for the long pieces of a slow
        path: the tag's rarest character is looked for first (one memchr; prose seldom holds
        the `_` of `tool_call`), and only where it occurs the whole opener (a search for its
        first two characters alone costs several times as much on prose, where `t` is
        common)."""
        if not self.idle or (self.rare in text and self._opener in text):
            return False
        if ws_follows:
            return True
        k = text.rfind("<", max(0, len(text) - len(self._opener) + 1))
        return k < 0 or not self._opener.startswith(text[k:])

    def close(self) -> str:
        """End of V: resolve what is held per the spec; returns the last text."""
        if self._closing:
            return ""
        self._closing = True
        if self.idle:  # plain text, nothing held, no WS run: nothing is left to resolve
            self.idle = False
            return ""
        out: list[str] = []
        if self._state != _DONE:
            self._run("", out)
        self._ws.clear()  # trailing WS of the whole message is dropped
        return "".join(out)

    @property
    def held_back(self) -> int:
        """Characters of V whose fate is still open (not counting a trailing WS run)."""
        if self._state == _PLAIN:
            return len(self._buf)
        if self._state == _DONE:
            return 0
        return sum(map(len, self._parts))

    @property
    def in_block(self) -> bool:
        """After an opener, until the block (or the opener as text) is settled."""
        return self._state in (_OPENED, _BODY, _CLOSER)

    # ----------------------------------------------------------------- the scan

    def _run(self, text: str, out: list[str]) -> None:
        if self._state == _PLAIN:
            buf, i = self._buf + text, 0
            self._buf = ""
        else:  # the block's text so far is in _parts; scan the new text alone
            buf, i = text, 0
        while i >= 0:
            state = self._state
            if state == _PLAIN:
                i = self._scan_plain(buf, i, out)
            elif state == _OPENED:
                buf, i = self._scan_opened(buf, i, out)
            elif state == _BODY:
                buf, i = self._scan_body(buf, i, out)
            elif state == _CLOSER:
                buf, i = self._scan_closer(buf, i)
            else:
                i = -1

    def _scan_plain(self, buf: str, i: int, out: list[str]) -> int:
        """Visible text up to the next opener; holds back a possible opener prefix."""
        opener = self._opener
        k = buf.find(opener, i) if self.rare in buf else -1
        if k >= 0:
            self._emit(buf[i:k], out)
            self._open_block()
            self._parts = [opener]
            return k + len(opener)
        n = len(buf)
        if not self._closing:
            k = buf.rfind("<", max(i, n - len(opener) + 1), n)
            if k >= 0 and opener.startswith(buf[k:]):
                self._emit(buf[i:k], out)
                self._buf = buf[k:]
                return -1
        self._emit(buf[i:] if i else buf, out)
        return -1

    def _scan_opened(self, buf: str, i: int, out: list[str]) -> tuple[str, int]:
        """After the opener: up to GAP WS, then the body's `{` or the opener is text."""
        n = len(buf)
        j = i
        while j < n and self._gap < GAP and buf[j] in WS:
            j += 1
            self._gap += 1
        if j == n:
            self._parts.append(buf[i:])
            if self._closing:
                self._truncated()
            return buf, -1
        if buf[j] != "{":
            return self._as_text(buf, i, out, None)
        self._parts.append(buf[i:j])
        self._state = _BODY
        self._json = JsonObjectPrefix()
        self._body_len = 0
        return buf, j

    def _scan_body(self, buf: str, i: int, out: list[str]) -> tuple[str, int]:
        """Run the JSON automaton over the body, up to MAX_BODY characters."""
        end = min(len(buf), i + spec.MAX_BODY - self._body_len)
        outcome, k = self._json.scan(buf, i, end)
        self._body_len += k - i
        if outcome == INVALID:
            return self._as_text(buf, i, out, TOOL_CALL_INVALID)
        self._parts.append(buf[i:k])
        if outcome == COMPLETE:
            body = "".join(self._parts)[len(self._opener) + self._gap:]
            call = read_call(body)
            if call is None:
                self._parts.pop()
                return self._as_text(buf, i, out, TOOL_CALL_INVALID)
            self._call = call
            self._state = _CLOSER
            self._parts = []
            return buf, k
        if self._body_len >= spec.MAX_BODY:
            self._parts.pop()
            return self._as_text(buf, i, out, TOOL_CALL_INVALID)
        if self._closing:
            self._truncated()
        return buf, -1

    def _scan_closer(self, buf: str, q: int) -> tuple[str, int]:
        """After a call's body: WS and the closer end the block; anything else leaves it
        unclosed, and what follows the body is visible again."""
        held = "".join(self._parts)
        if held:
            buf, q = held + buf[q:], 0
        closer = self._closer_at.match(buf, q)
        if closer is not None:
            self._end_call(None)
            return buf, closer.end()
        if not self._closing and self._closer_so_far.match(buf, q) is not None:
            self._parts = [buf[q:]]
            return buf, -1
        self._end_call(TOOL_CALL_UNCLOSED)
        return buf, q

    def _as_text(self, buf: str, i: int, out: list[str], warning: str | None
                 ) -> tuple[str, int]:
        """The opener is plain text: emit it and scan again just after it (the block's text
        so far, then the rest of buf from i)."""
        held = "".join(self._parts)
        self._parts = []
        self._state = _PLAIN
        if warning is not None:
            self._warn(warning)
        self._emit(self._opener, out)
        return held[len(self._opener):] + buf[i:], 0

    # ----------------------------------------------------------------- blocks

    def _open_block(self) -> None:
        self._state = _OPENED
        self._gap = 0
        self._opened_at = (self.chunk_index, self.stream_pos)

    def _end_call(self, ending: str | None) -> None:
        call = self._call
        assert call is not None
        self._call = None
        self._state = _PLAIN
        self._parts = []
        if not self._offered and not self.calls:
            self._warn(TOOL_CALL_UNREQUESTED)
        if ending is not None:
            self._warn(ending)
        self.calls.append(call)
        self.pending.append(call)

    def _truncated(self) -> None:
        """V ended inside a call the model did not finish: it and the rest are dropped."""
        self._warn(TOOL_CALL_TRUNCATED)
        self._parts = []
        self._state = _DONE

    def _warn(self, kind: str) -> None:
        chunk, offset = self._opened_at
        self.warnings.append(kind)
        self.records.append(FilterWarning(kind, TOOL_MARKER, chunk, offset, self.stream_pos))


#: Lower-case letters, the most frequent in English prose first.
_LETTERS_BY_FREQUENCY: Final = "etaoinsrhldcumfpgwybvkxjqz"


class _TagText(NamedTuple):
    """What a split looks for, given its tag."""

    opener: str
    closer: str
    rare: str
    prefixes: tuple[str, ...]
    closer_at: re.Pattern[str]
    closer_so_far: re.Pattern[str]


@functools.lru_cache(maxsize=32)
def _tag_text(tag: str) -> _TagText:
    """Built once per tag: a split is made for every answer, and building this each time
    would cost a plain answer in 4 KB chunks a measurable share of its time."""
    if not valid_tag(tag):
        raise ValueError(f"bad tool call tag {tag!r}")
    opener = f"<{tag}>"
    closer = f"</{tag}>"
    ranks = _LETTERS_BY_FREQUENCY
    rare = max(tag, key=lambda c: ranks.index(c) if c in ranks else len(ranks))
    closer_at = re.compile(f"[ \\t\\r\\n]{{0,{GAP}}}{re.escape(closer)}")
    closer_so_far = re.compile(
        f"[ \\t\\r\\n]{{0,{GAP}}}(?:{_nested_prefix(closer[:-1])})?\\Z")
    prefixes = tuple(opener[:n] for n in range(1, len(opener)))
    return _TagText(opener, closer, rare, prefixes, closer_at, closer_so_far)


def _nested_prefix(text: str) -> str:
    """A pattern matching every prefix of `text` from its first character on (`a(?:b)?`)."""
    pattern = ""
    for c in reversed(text):
        pattern = f"{re.escape(c)}(?:{pattern})?" if pattern else re.escape(c)
    return pattern


def read_call(body: str) -> ToolCall | None:
    """The call a complete JSON object denotes, or None when it is not one: `name` a
    non-empty string; `arguments` (else `parameters`) an object, a string, null or missing.
    The arguments are the object's source text, the string's content, or `{}`."""
    members = top_level_members(body)
    name = members.get("name")
    if name is None or not name.startswith('"'):
        return None
    name_text = json.loads(name)
    if not name_text:
        return None
    value = members.get("arguments", members.get("parameters"))
    if value is None or value == "null":
        return ToolCall(name_text, "{}")
    if value.startswith("{"):
        return ToolCall(name_text, value)
    if value.startswith('"'):
        return ToolCall(name_text, json.loads(value))
    return None


def top_level_members(body: str) -> dict[str, str]:
    """The source text of each top-level member's value of a valid JSON object (of a
    repeated key, the last). Iterative, so any depth reads in one pass."""
    members: dict[str, str] = {}
    depth = 0
    key: str | None = None
    expect_key = False
    value_start = -1
    for token in _TOKEN.finditer(body):
        string, opening, closing, punct, scalar = token.groups()
        start = token.start(token.lastindex or 0)
        if opening:
            depth += 1
            if depth == 1:
                expect_key = True
            elif depth == 2 and value_start < 0:
                value_start = start
        elif closing:
            depth -= 1
            if depth == 1 and key is not None:
                members[key] = body[value_start:token.end()]
                key, value_start = None, -1
        elif punct:
            if depth == 1 and punct == ",":
                expect_key = True
        elif depth == 1:
            text = string or scalar
            assert text is not None
            if expect_key:
                key, expect_key = json.loads(text), False
            elif key is not None:
                members[key] = text
                key = None
    return members
