"""Feeding helpers shared by the stream tests: every chunking is checked the same way."""

from __future__ import annotations

import itertools
import random
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from app.stream import GARBLE_WINDOW, MAX_BODY, MarkerFilter
from tests.stream.oracle import reference

WS = " \t\r\n"
OVERALL_HOLD = MAX_BODY + GARBLE_WINDOW + 64
PLAIN_HOLD = 63
HEADER_KEYWORDS = ("METADATA", "MSG_CONTEXT")
LONGEST_HEADER = 4 + 16 + 11 + 16 + 1 + 16  # "<!--", WS, keyword, WS, ":", WS
CLOSER_SO_FAR = re.compile(r"[ \t\r\n]{0,16}-{0,10}")
"""What a closer after a complete body may have read before its `>`."""


@dataclass
class Streamed:
    text: str
    metadata: dict[str, Any] | None
    warnings: list[str]
    spans: list[tuple[str, int, int]]  # (warning, block offset, block end) per record


def stream(chunks: Sequence[str], expected_text: str | None = None) -> Streamed:
    """Feed chunks through one MarkerFilter, checking the invariants after every chunk.

    - prefix: what was emitted so far is a prefix of `expected_text` (if given);
    - bounded hold-back, by the filter's own counters: never more than
      MAX_BODY + GARBLE_WINDOW + 64 characters held or buffered, and at most 63 held while
      outside a marker block;
    - bounded hold-back, measured from outside (HoldBackCheck): the same two bounds on the
      visible text that the input fed so far decides but that was not emitted yet.
    """
    f = MarkerFilter()
    check = HoldBackCheck("".join(chunks))
    emitted: list[str] = []
    position = 0
    fed = 0
    for chunk in [*chunks, None]:
        piece = f.close() if chunk is None else f.feed(chunk)
        if expected_text is not None:
            assert expected_text.startswith(piece, position), (
                f"emitted {piece!r} at {position} is not a prefix of the final text "
                f"(after {len(emitted)} chunks)"
            )
        position += len(piece)
        emitted.append(piece)
        assert f.held_back <= OVERALL_HOLD and f.buffered <= OVERALL_HOLD
        if not f.in_block:
            assert f.held_back <= PLAIN_HOLD, f"held {f.held_back} characters of plain text"
        if chunk is not None:
            fed += len(chunk)
            check.after_feed(fed, position)
    spans = [(r.kind, r.offset, r.end) for r in f.records]
    return Streamed("".join(emitted), f.metadata, f.warnings, spans)


@dataclass(frozen=True)
class VisibleLayout:
    """Where the final visible text of one whole input comes from, per the oracle."""

    text: str
    joined: str
    """The visible pieces joined, before the final strip."""
    lead: int
    """Leading WS of `joined` (not part of the final text)."""
    visible_before: list[int]
    """visible_before[k]: characters of `joined` that come from text[:k]."""
    solid_end: list[int]
    """solid_end[n]: end of the last non-WS character in joined[:n] (0 if none)."""
    plain: list[tuple[int, int, int]]
    """(scan_from, known_from, until): while the input fed so far ends at k with
    known_from <= k <= until, any filter knows it is in plain text, and the header search
    restarted at scan_from (the start of the output or the end of the last block)."""


@lru_cache(maxsize=64)
def visible_layout(text: str) -> VisibleLayout:
    result = reference(text)
    visible = bytearray(len(text))
    start = 0
    for removed in result.blocks:
        visible[start : removed.start] = b"\x01" * (removed.start - start)
        start = removed.end
    visible[start:] = b"\x01" * (len(text) - start)
    joined = "".join(result.pieces)
    solid_end = [0] * (len(joined) + 1)
    for i, c in enumerate(joined):
        solid_end[i + 1] = solid_end[i] if c in WS else i + 1
    # Plain stretches: the first one runs to the first header; after a block, one starts
    # where any filter has learnt how the block ended, per the spec's rules.
    plain: list[tuple[int, int, int]] = []
    scan_from = known_from = 0
    for block in [*result.blocks, None]:
        until = len(text) if block is None else block.start
        if known_from <= until:
            plain.append((scan_from, known_from, until))
        if block is None:
            break
        scan_from = block.end
        if "unclosed_block" in block.warnings:
            # the closer attempt after the body fails at the character after this
            read = CLOSER_SO_FAR.match(text, block.end)
            assert read is not None
            ended = read.end() + 1
        elif "unterminated_block" in block.warnings:
            # no `-->` may start in text[p : p + GARBLE_WINDOW]: settled two characters later
            ended = block.end + GARBLE_WINDOW + 2
        elif "truncated_block" in block.warnings or "oversized_block" in block.warnings:
            ended = len(text) + 1  # never (or not worth modelling): no plain check
        else:
            ended = block.end  # a closer or the garble window's `-->` ends it
        # A block may start inside the garble window of an earlier one that is still open:
        # a `-->` there would swallow it. The filter knows it is in plain text only once
        # every earlier block's end is settled too.
        known_from = max(known_from, ended)
    return VisibleLayout(
        text=text,
        joined=joined,
        lead=len(joined) - len(joined.lstrip(WS)),
        visible_before=list(itertools.accumulate(visible, initial=0)),
        solid_end=solid_end,
        plain=plain,
    )


def could_become_header(s: str) -> bool:
    """s is the start of a header match that more text could still complete."""
    if len(s) <= 4:
        return "<!--".startswith(s)
    if not s.startswith("<!--"):
        return False
    word = s[4:].lstrip(WS)
    if len(s) - 4 - len(word) > 16:
        return False
    return word.isascii() and any(k.startswith(word.upper()) for k in HEADER_KEYWORDS)


class HoldBackCheck:
    """The spec's bounded hold-back, measured without the filter's own counters.

    After the first k input characters, the final visible text (the oracle's) has a part
    that comes from them. What of it was not emitted yet is held back by the filter. The
    spec exempts a trailing WS run: WS that nothing known to be visible follows yet. In
    plain text, the filter knows all of it is visible except a tail that could still become
    a header; that tail is held back too (it cannot be emitted) and counts, and the WS run
    before it is the exempt one. Elsewhere, which characters the filter knows to be visible
    is not modelled, so the bound is checked only when the unemitted part is longer than the
    bound even without its trailing WS run and its longest other WS run.
    """

    def __init__(self, text: str) -> None:
        self.layout = visible_layout(text)

    def after_feed(self, fed: int, emitted: int) -> None:
        layout = self.layout
        decided = max(0, layout.visible_before[fed] - layout.lead)  # incl. WS at its end
        if decided - emitted <= PLAIN_HOLD:
            return
        for scan_from, known_from, until in layout.plain:
            if known_from <= fed <= until:
                held = self._plain_held(scan_from, fed, emitted)
                assert held <= PLAIN_HOLD, (
                    f"after {fed} input characters, {held} characters of plain text are "
                    f"held back (emitted {emitted})"
                )
                return
        if decided - emitted <= OVERALL_HOLD:
            return
        unemitted = layout.joined[layout.lead + emitted : layout.visible_before[fed]]
        rest = unemitted.rstrip(WS)
        runs = [len(run) for run in re.findall(r"[ \t\r\n]+", rest)]
        held = len(rest) - max(runs, default=0)
        assert held <= OVERALL_HOLD, f"after {fed} input characters, {held} held back"

    def _plain_held(self, scan_from: int, fed: int, emitted: int) -> int:
        layout = self.layout
        text = layout.text
        tail_from = fed
        lowest = max(scan_from, fed - LONGEST_HEADER)
        x = text.rfind("<", lowest, fed)
        while x != -1:
            if could_become_header(text[x:fed]):
                tail_from = x
            x = text.rfind("<", lowest, x)
        known = layout.solid_end[layout.visible_before[tail_from]]
        known_held = max(0, known - layout.lead - emitted)  # no trailing WS run
        tail_held = len(text[tail_from:fed].rstrip(WS))
        return known_held + tail_held


def split_at(text: str, cuts: Sequence[int]) -> list[str]:
    edges = [0, *sorted(set(cuts)), len(text)]
    return [text[a:b] for a, b in itertools.pairwise(edges)]


def random_pieces(text: str, rng: random.Random, max_piece: int) -> list[str]:
    """`text` cut at random places, 1 to `max_piece` characters a piece."""
    pieces, position = [], 0
    while position < len(text):
        step = rng.randint(1, max_piece)
        pieces.append(text[position:position + step])
        position += step
    return pieces


def one_char_chunks(text: str) -> list[str]:
    return list(text)


def two_way_splits(text: str) -> Iterator[list[str]]:
    for cut in range(len(text) + 1):
        yield [text[:cut], text[cut:]]


def random_chunkings(text: str, seed: int, count: int) -> Iterator[list[str]]:
    rng = random.Random(seed)
    for _ in range(count):
        cuts: list[int] = []
        position = 0
        largest = rng.choice([2, 5, 17, 64, 4096])
        while position < len(text):
            position += rng.randint(1, largest)
            cuts.append(min(position, len(text)))
        yield split_at(text, cuts)


def plain_hold_ok(text: str, chunks: Sequence[str]) -> None:
    """Hold-back of an output without markers, fed as chunks: checked from outside by
    HoldBackCheck after every chunk (at most 63 characters besides a trailing WS run)."""
    want = reference(text)
    assert not want.blocks, "not plain text"
    stream(chunks, expected_text=want.text)
