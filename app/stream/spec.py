"""The constants and patterns of marker spec v1, in one place.

The header pattern is the spec's regular expression verbatim, except that the keyword is
spelled with explicit ASCII case classes: Python's `re.IGNORECASE` would also fold
non-ASCII look-alikes (for example U+017F LONG S matches `s`), which the spec excludes.
"""

from __future__ import annotations

import re

WS = " \t\r\n"
"""The only four characters the spec treats as white space."""

MAX_BODY = 65_536
"""Longest body, in characters, that may still complete."""

GARBLE_WINDOW = 1_024
"""A broken body's `-->` must start within this many characters of the break."""

GARBLE_SPAN = GARBLE_WINDOW + 2
"""Characters from the break needed to rule out a `-->` starting inside the window."""

CLOSER_END = "-->"

_W = "[ \t\r\n]"
_METADATA = "[Mm][Ee][Tt][Aa][Dd][Aa][Tt][Aa]"
_MSG_CONTEXT = "[Mm][Ss][Gg]_[Cc][Oo][Nn][Tt][Ee][Xx][Tt]"

HEADER_START = re.compile(f"<!--{_W}{{0,16}}(?P<keyword>{_METADATA}|{_MSG_CONTEXT})")
"""Everything a header needs to exist; what follows the keyword is optional."""

HEADER = re.compile(
    f"<!--{_W}{{0,16}}(?P<keyword>{_METADATA}|{_MSG_CONTEXT}){_W}{{0,16}}:?{_W}{{0,16}}"
)
"""The spec's header: its end is the body start b."""


def _nested_prefix(parts: list[str]) -> str:
    """`a(?:b(?:c)?)?`: matches every prefix of the concatenation of `parts` (at least `a`)."""
    pattern = ""
    for part in reversed(parts):
        pattern = f"{part}(?:{pattern})?" if pattern else part
    return pattern


def _letters(word: str) -> list[str]:
    return [f"[{c.upper()}{c.lower()}]" if c.isalpha() else re.escape(c) for c in word]


_KEYWORD_PREFIX = (
    f"(?:{_nested_prefix(_letters('METADAT'))}|{_nested_prefix(_letters('MSG_CONTEX'))})"
)

HEADER_START_PREFIX = re.compile("<(?:!(?:-(?:-" + _W + "{0,16}" + _KEYWORD_PREFIX + "?)?)?)?\\Z")
"""A proper prefix of a header start that reaches the end of the text: it may still grow
into a header, so it is held back. Only `<` can begin one, and `<` occurs nowhere else in
it, so at most one such candidate is ever open."""

HEADER_START_PREFIX_MAX = 30
"""Longest proper prefix of a header start: `<!--`, 16 WS, `MSG_CONTEX`."""

CLOSER = re.compile(f"{_W}{{0,16}}-{{2,10}}>")
CLOSER_PREFIX = re.compile(f"{_W}{{0,16}}-{{0,10}}\\Z")
"""What may still become a closer once more text arrives."""

METADATA = "METADATA"
MSG_CONTEXT = "MSG_CONTEXT"
