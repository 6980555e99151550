"""Where Markdown code is, so that `<!--` inside code is not taken for an HTML comment.

A CommonMark-like approximation, linear in the text: fenced blocks (a line opening with 3+
backticks or tildes, up to 3 spaces of indent, closed by a line with the same character at
least as long, or running to the end) and inline code (a run of n backticks closed by the next
run of exactly n; an unmatched run is literal text). Inline spans are not limited to one
paragraph; for finding stray comments that is close enough and errs towards "code".
"""

from __future__ import annotations

import bisect
import re

_FENCE_OPEN = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_BACKTICKS = re.compile(r"`+")


def _closes(fence: str, run: str, rest: str) -> bool:
    """A closing fence: the opener's character, at least as long, nothing after it."""
    return run[0] == fence[0] and len(run) >= len(fence) and not rest.strip()


def _fenced_spans(text: str) -> list[tuple[int, int]]:
    spans: list[tuple[int, int]] = []
    pos = 0
    fence: str | None = None
    start = 0
    for line in text.splitlines(keepends=True):
        opening = _FENCE_OPEN.match(line)
        if fence is None:
            if opening and not (opening.group(1)[0] == "`" and "`" in line[opening.end():]):
                fence, start = opening.group(1), pos
        elif opening and _closes(fence, opening.group(1), line[opening.end():]):
            spans.append((start, pos + len(line)))
            fence = None
        pos += len(line)
    if fence is not None:
        spans.append((start, len(text)))
    return spans


def _inline_spans(text: str, lo: int, hi: int) -> list[tuple[int, int]]:
    runs = [(m.start(), m.end()) for m in _BACKTICKS.finditer(text, lo, hi)]
    starts_by_len: dict[int, list[int]] = {}
    for index, (start, end) in enumerate(runs):
        starts_by_len.setdefault(end - start, []).append(index)
    spans: list[tuple[int, int]] = []
    index = 0
    while index < len(runs):
        start, end = runs[index]
        same = starts_by_len[end - start]
        later = bisect.bisect_right(same, index)
        if later < len(same):
            closer = same[later]
            spans.append((start, runs[closer][1]))
            index = closer + 1
        else:
            index += 1
    return spans


def code_spans(text: str) -> list[tuple[int, int]]:
    """Sorted, non-overlapping [start, end) ranges of `text` that are code."""
    spans: list[tuple[int, int]] = []
    cursor = 0
    for start, end in _fenced_spans(text):
        spans.extend(_inline_spans(text, cursor, start))
        spans.append((start, end))
        cursor = end
    spans.extend(_inline_spans(text, cursor, len(text)))
    return spans


def mask_code(text: str) -> str:
    """The text with every code character replaced by a space (positions unchanged)."""
    spans = code_spans(text)
    if not spans:
        return text
    pieces: list[str] = []
    cursor = 0
    for start, end in spans:
        pieces.append(text[cursor:start])
        pieces.append(" " * (end - start))
        cursor = end
    pieces.append(text[cursor:])
    return "".join(pieces)
