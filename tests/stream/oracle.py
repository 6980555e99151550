"""A slow, whole-text reference for marker spec v1, written straight from its rules.

Independent of app.stream on purpose: its own regular expressions, a recursive-descent
JSON prefix checker instead of an automaton, `str.find` for the garble window, and no
streaming at all. The property tests hold MarkerFilter to it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

WS = " \t\r\n"
MAX_BODY = 65_536
GARBLE_WINDOW = 1_024
HEADER = re.compile(
    r"<!--[ \t\r\n]{0,16}(METADATA|MSG_CONTEXT)[ \t\r\n]{0,16}:?[ \t\r\n]{0,16}",
    re.IGNORECASE | re.ASCII,
)
CLOSER = re.compile(r"[ \t\r\n]{0,16}-{2,10}>")


class Truncated(Exception):
    """The text ended while the object could still continue."""


class Invalid(Exception):
    """No valid object can continue at position p."""

    def __init__(self, p: int) -> None:
        super().__init__(p)
        self.p = p


def object_end(text: str, b: int, stop: int) -> int:
    """End q of the JSON object at text[b:stop]; raises Invalid(p) or Truncated."""

    def peek(i: int) -> str:
        if i >= stop:
            raise Truncated
        return text[i]

    def skip_ws(i: int) -> int:
        while i < stop and text[i] in WS:
            i += 1
        return i

    def value(i: int) -> int:
        c = peek(i)
        if c == "{":
            return members(i, "}", keyed=True)
        if c == "[":
            return members(i, "]", keyed=False)
        if c == '"':
            return string(i)
        if c == "-" or (c.isascii() and c.isdigit()):
            return number(i)
        for word in ("true", "false", "null"):
            if c == word[0]:
                for k, expected in enumerate(word):
                    if peek(i + k) != expected:
                        raise Invalid(i + k)
                return i + len(word)
        raise Invalid(i)

    def members(i: int, close: str, keyed: bool) -> int:
        i = skip_ws(i + 1)
        if peek(i) == close:
            return i + 1
        while True:
            if keyed:
                if peek(i) != '"':
                    raise Invalid(i)
                i = skip_ws(string(i))
                if peek(i) != ":":
                    raise Invalid(i)
                i = skip_ws(i + 1)
            i = skip_ws(value(i))
            if peek(i) == close:
                return i + 1
            if peek(i) != ",":
                raise Invalid(i)
            i = skip_ws(i + 1)

    def string(i: int) -> int:
        i += 1
        while True:
            c = peek(i)
            if c == '"':
                return i + 1
            if c == "\\":
                e = peek(i + 1)
                if e == "u":
                    for k in range(2, 6):
                        if peek(i + k) not in "0123456789abcdefABCDEF":
                            raise Invalid(i + k)
                    i += 6
                elif e in '"\\/bfnrt':
                    i += 2
                else:
                    raise Invalid(i + 1)
            elif ord(c) < 0x20:
                raise Invalid(i)
            else:
                i += 1

    def digits(i: int) -> int:
        if peek(i) not in "0123456789":
            raise Invalid(i)
        while peek(i) in "0123456789":
            i += 1
        return i

    def number(i: int) -> int:
        if peek(i) == "-":
            i += 1
        i = i + 1 if peek(i) == "0" else digits(i)
        if peek(i) == ".":
            i = digits(i + 1)
        if peek(i) in "eE":
            i += 1
            if peek(i) in "+-":
                i += 1
            i = digits(i)
        return i

    if peek(b) != "{":
        raise Invalid(b)
    return value(b)


@dataclass
class Block:
    marker: str
    start: int
    end: int
    warnings: list[str]


@dataclass
class Result:
    text: str
    metadata: dict[str, Any] | None
    warnings: list[str]
    pieces: list[str] = field(default_factory=list)  # visible pieces before the final strip
    blocks: list[Block] = field(default_factory=list)


def reference(t: str) -> Result:
    """Apply the spec's rules to the whole output t."""
    i = 0
    pieces: list[str] = []
    metadata: dict[str, Any] | None = None
    blocks: list[Block] = []
    while True:
        m = HEADER.search(t, i)  # step 1: leftmost header (re's greedy match)
        if m is None:
            pieces.append(t[i:])
            break
        h, b = m.start(), m.end()
        pieces.append(t[i:h])  # step 2
        marker = m.group(1).upper()
        warnings = []
        if marker == "MSG_CONTEXT":
            warnings.append("context_echo")
        elif not "".join(pieces).strip(WS):
            warnings.append("metadata_at_start")
        stop = min(len(t), b + MAX_BODY)
        ending: str | None  # the block's ending warning; None for a clean closer
        try:  # step 3
            q = object_end(t, b, stop)
        except Invalid as invalid:
            end, ending = garble(t, invalid.p, "garbled_block", "unterminated_block")
        except Truncated:
            if len(t) - b >= MAX_BODY:
                end, ending = garble(t, b + MAX_BODY, "oversized_block", "oversized_block")
            else:
                end, ending = len(t), "truncated_block"
        else:
            if marker == "METADATA":  # step 4
                metadata = {**(metadata or {}), **json.loads(t[b:q])}
            closer = CLOSER.match(t, q)
            end, ending = (closer.end(), None) if closer else (q, "unclosed_block")
        if ending:
            warnings.append(ending)
        blocks.append(Block(marker, h, end, warnings))
        i = end  # step 5
    text = "".join(pieces).strip(WS)
    warnings = [w for block in blocks for w in block.warnings]
    return Result(text, metadata, warnings, pieces, blocks)


def garble(t: str, p: int, found: str, missed: str) -> tuple[int, str]:
    """Block end and warning after a body broke at p."""
    g = t.find("-->", p)
    if g != -1 and g < p + GARBLE_WINDOW:
        return g + 3, found
    return p, missed
