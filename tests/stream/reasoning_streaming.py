"""Feeding helpers for the reasoning split: both channels, the spec's invariants checked after
every piece, and a whole-text reference written from the spec's "Reasoning (v1.2)" rules."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from app.stream.reasoning import ReasoningFormat, ReasoningSplit
from tests.stream.oracle import HEADER, WS, reference
from tests.stream.streaming import OVERALL_HOLD, PLAIN_HOLD


@dataclass
class SplitStreamed:
    text: str
    reasoning: str
    metadata: dict[str, Any] | None
    warnings: list[str]
    text_pieces: list[str]
    reasoning_pieces: list[str]


@dataclass
class Expected:
    text: str
    reasoning: str
    metadata: dict[str, Any] | None
    warnings: list[str]


def reference_split(content: str, field: str = "", reasoning_format: ReasoningFormat = "think",
                    tag: str = "think") -> Expected:
    """The spec's split of a whole answer, step by step, over the marker oracle."""
    opener, closer = f"<{tag}>", f"</{tag}>"
    j = len(content) - len(content.lstrip(WS))
    start: int | None = None
    if reasoning_format != "none":
        if content.startswith(opener, j):
            start = j + len(opener)
        elif reasoning_format == "think-prefilled":
            start = 0
    unclosed = False
    if start is None:
        inline, rest = "", content
    else:
        k = content.find(closer, start)
        if k < 0:
            inline, rest, unclosed = content[start:], "", True
        else:
            inline, rest = content[start:k], content[k + len(closer):]
    whole = field + inline
    r, c = reference(whole), reference(rest)
    warnings = ["markers_in_reasoning"] if HEADER.search(whole) else []
    warnings += ["reasoning_unclosed"] if unclosed else []
    return Expected(c.text, r.text, c.metadata, warnings + c.warnings)


def stream_split(
    chunks: Sequence[str], field_chunks: Sequence[str] = (), *,
    reasoning_format: ReasoningFormat = "think", tag: str = "think",
    expected: Expected | None = None,
) -> SplitStreamed:
    """The field chunks, then the content chunks, then close, through one ReasoningSplit;
    after every piece: each channel's output so far is a prefix of the expected one, and the
    split holds no more than the spec allows."""
    split = ReasoningSplit(reasoning_format, tag)
    opener_hold, closer_hold = len(tag) + 1, len(tag) + 2
    texts: list[str] = []
    thoughts: list[str] = []

    def check_prefix() -> None:
        if expected is not None:
            got_text, got_reasoning = "".join(texts), "".join(thoughts)
            assert expected.text.startswith(got_text), f"text {got_text!r} not a prefix"
            assert expected.reasoning.startswith(got_reasoning), (
                f"reasoning {got_reasoning!r} not a prefix")

    def check_hold() -> None:
        if not split.decided:
            assert split.held_back <= opener_hold
        elif split.in_reasoning:
            rf = split.reasoning_filter
            assert split.held_back - rf.held_back <= closer_hold
            assert rf.held_back <= OVERALL_HOLD
            if not rf.in_block:
                assert rf.held_back <= PLAIN_HOLD
        else:
            cf = split.content_filter
            assert cf.held_back <= OVERALL_HOLD
            if not cf.in_block:
                assert cf.held_back <= PLAIN_HOLD

    for piece in field_chunks:
        thoughts.append(split.feed_reasoning(piece))
        check_prefix()
        check_hold()
    for chunk in chunks:
        texts.append(split.feed(chunk))
        thoughts.append(split.take_reasoning())
        check_prefix()
        check_hold()
    texts.append(split.close())
    thoughts.append(split.take_reasoning())
    check_prefix()
    return SplitStreamed("".join(texts), "".join(thoughts), split.metadata, split.warnings,
                         texts, thoughts)
