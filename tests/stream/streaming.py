"""Feeding helpers shared by the stream tests: every chunking is checked the same way."""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from app.stream import GARBLE_WINDOW, MAX_BODY, MarkerFilter

WS = " \t\r\n"
OVERALL_HOLD = MAX_BODY + GARBLE_WINDOW + 64
PLAIN_HOLD = 63


@dataclass
class Streamed:
    text: str
    metadata: dict[str, Any] | None
    warnings: list[str]
    spans: list[tuple[str, int, int]]  # (warning, block offset, block end) per record


def stream(chunks: Sequence[str], expected_text: str | None = None) -> Streamed:
    """Feed chunks through one MarkerFilter, checking the invariants after every chunk.

    - prefix: what was emitted so far is a prefix of `expected_text` (if given);
    - bounded hold-back: never more than MAX_BODY + GARBLE_WINDOW + 64 characters held or
      buffered, and at most 63 held while outside a marker block.
    """
    f = MarkerFilter()
    emitted: list[str] = []
    position = 0
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
    spans = [(r.kind, r.offset, r.end) for r in f.records]
    return Streamed("".join(emitted), f.metadata, f.warnings, spans)


def split_at(text: str, cuts: Sequence[int]) -> list[str]:
    edges = [0, *sorted(set(cuts)), len(text)]
    return [text[a:b] for a, b in itertools.pairwise(edges)]


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
    """External hold-back check for outputs without markers: after every chunk, all but at
    most 63 characters of the stripped input so far have been emitted."""
    f = MarkerFilter()
    emitted = 0
    fed = ""
    for chunk in chunks:
        emitted += len(f.feed(chunk))
        fed += chunk
        assert len(fed.strip(WS)) - emitted <= PLAIN_HOLD
