"""The AnswerStream with reasoning: both channels through the one split, Reasoning and Delta
events under one seq counter, what is sent exactly what is kept, and the thinking time from
the injected clock."""

from __future__ import annotations

import datetime as dt
import random
from typing import Any

import pytest

from app.answer.answer import AnswerStream
from app.answer.events import AnswerOut, Delta, Reasoning, TurnFailure
from app.answer.inputs import UpstreamChunk
from tests.stream.streaming import random_pieces
from tests.stream.test_reasoning_conformance import CASES, IDS

T0 = dt.datetime(2026, 11, 28, 3, 0, tzinfo=dt.UTC)


class Clock:
    """Moves only when told to."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> dt.datetime:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += dt.timedelta(milliseconds=ms)


def events_of(out: AnswerOut | None) -> list[Delta | Reasoning]:
    if out is None:
        return []
    return list(out) if isinstance(out, tuple) else [out]


def chunks_of(case: dict[str, Any], seed: str) -> list[UpstreamChunk]:
    """The case as a model server would send it: the field deltas first (each its own chunk,
    or riding on a content chunk's first pieces), then the content, cut at random."""
    rng = random.Random(seed)
    field = random_pieces(case.get("reasoning_input", ""), rng, 5)
    content = random_pieces(case["input"], rng, 5)
    chunks = [UpstreamChunk("", reasoning=piece) for piece in field]
    if chunks and content and rng.random() < 0.5:
        chunks[-1] = UpstreamChunk(content.pop(0), reasoning=chunks[-1].reasoning)
    return chunks + [UpstreamChunk(piece) for piece in content]


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_every_reasoning_case_through_the_answer(case: dict[str, Any]) -> None:
    for attempt in range(8):
        answer = AnswerStream(reasoning_format=case.get("reasoning_format", "think"))
        events = [e for c in chunks_of(case, f"{case['id']}.{attempt}")
                  for e in events_of(answer.feed(c))]
        events += events_of(answer.end())
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        assert "".join(e.text for e in events if isinstance(e, Delta)) == answer.content
        assert "".join(e.text for e in events if isinstance(e, Reasoning)) == answer.reasoning
        assert (answer.content, answer.reasoning, answer.metadata, answer.warning_names) == (
            case["text"], case["reasoning"], case["metadata"], case["warnings"])
        assert [w.kind for w in answer.warnings] == case["warnings"]
        if case["reasoning"] and case["text"]:
            last_thought = max(e.seq for e in events if isinstance(e, Reasoning))
            first_text = min(e.seq for e in events if isinstance(e, Delta))
            assert last_thought < first_text  # the thinking is shown before the answer


def test_a_chunk_that_ends_the_thinking_gives_both_events_in_order() -> None:
    answer = AnswerStream()
    assert answer.feed(UpstreamChunk("<think>plan")) == Reasoning("plan", 1)
    assert answer.feed(UpstreamChunk(" more</think>Hi")) == (
        Reasoning(" more", 2), Delta("Hi", 3))
    assert answer.feed(UpstreamChunk(" there")) == Delta(" there", 4)
    assert answer.end() is None
    assert (answer.reasoning, answer.content) == ("plan more", "Hi there")


def test_thinking_time_runs_from_the_first_thought_to_the_first_text() -> None:
    clock = Clock()
    answer = AnswerStream(clock=clock)
    clock.advance(500)  # waiting for the model: not thinking yet
    answer.feed(UpstreamChunk("", reasoning="Let me see."))
    clock.advance(1_200)
    assert answer.reasoning_ms == 1_200  # still thinking: so far
    answer.feed(UpstreamChunk("", reasoning=" Yes."))
    clock.advance(800)
    answer.feed(UpstreamChunk("Answer."))
    clock.advance(5_000)
    answer.end()
    assert answer.reasoning_ms == 2_000


def test_thinking_that_never_ends_is_timed_to_the_end() -> None:
    clock = Clock()
    answer = AnswerStream(clock=clock)
    answer.feed(UpstreamChunk("<think>hmm"))
    clock.advance(3_000)
    answer.fail(TurnFailure("upstream_error", "boom"), flush=True)
    clock.advance(1_000)
    assert (answer.reasoning, answer.content, answer.reasoning_ms) == ("hmm", "", 3_000)
    assert answer.warning_names == ["reasoning_unclosed"]


def test_no_reasoning_no_thinking_time() -> None:
    answer = AnswerStream()
    answer.feed(UpstreamChunk("Plain answer."))
    answer.end()
    assert (answer.reasoning, answer.reasoning_ms) == ("", None)


def test_the_warnings_are_reported_once_each() -> None:
    answer = AnswerStream()
    answer.feed(UpstreamChunk("<think>a <!-- MSG_CONTEXT: {} --> b"))
    assert [w.kind for w in answer.take_warnings()] == ["markers_in_reasoning"]
    answer.feed(UpstreamChunk(" c"))
    answer.end()
    assert [w.kind for w in answer.take_warnings()] == ["reasoning_unclosed"]
    assert answer.take_warnings() == []
    assert answer.warning_names == ["markers_in_reasoning", "reasoning_unclosed"]


def test_the_format_and_tag_are_the_answers() -> None:
    prefilled = AnswerStream(reasoning_format="think-prefilled", reasoning_tag="reason")
    events = events_of(prefilled.feed(UpstreamChunk("thinking</reason>Done")))
    assert events == [Reasoning("thinking", 1), Delta("Done", 2)]
    plain = AnswerStream(reasoning_format="none")
    plain.feed(UpstreamChunk("<think>x</think>y"))
    plain.end()
    assert (plain.content, plain.reasoning) == ("<think>x</think>y", "")


def test_reasoning_counts_towards_the_completion_estimate() -> None:
    answer = AnswerStream()
    answer.feed(UpstreamChunk("", reasoning="abcd"))
    answer.feed(UpstreamChunk("ef"))
    assert answer.raw_bytes == 6
