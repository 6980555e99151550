"""ChoiceSet without a socket: each choice is exactly one AnswerStream's text for its own
output, however the choices interleave; finishes come last; tool call deltas pass untouched
and merge into whole calls; the call record covers every choice."""

from __future__ import annotations

import datetime as dt
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from app.answer.call_usage import CallContext
from app.answer.choices import ChoiceChunk, ChoiceDelta, ChoicePiece, ChoiceSet
from app.answer.events import TurnFailure
from app.answer.inputs import ProviderUsage
from app.answer.pricing import ModelPrice, PriceTable
from app.core.cleaning import clean_and_strip_markers
from tests.stream.hostile import any_output
from tests.stream.streaming import random_pieces
from tests.stream.test_conformance import CASES

NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def interleaved(outputs: list[str], seed: int) -> list[ChoiceChunk]:
    """The outputs' pieces as chunks, choices mixed in a random order."""
    rng = random.Random(seed)
    queues = [[(i, p) for p in random_pieces(text, rng, 9)] for i, text in enumerate(outputs)]
    chunks = []
    while any(queues):
        queue = rng.choice([q for q in queues if q])
        index, text = queue.pop(0)
        chunks.append(ChoiceChunk((ChoicePiece(index, text),)))
    return chunks


def run(choices: ChoiceSet, chunks: list[ChoiceChunk]) -> list[ChoiceDelta]:
    out = [d for chunk in chunks for d in choices.feed(chunk)]
    return out + choices.end()


def text_of(deltas: list[ChoiceDelta], index: int) -> str:
    return "".join(d.text for d in deltas if d.index == index)


@settings(max_examples=60, deadline=None)
@given(outputs=st.lists(any_output, min_size=1, max_size=3), seed=st.integers(0, 10**6))
def test_each_choice_is_its_own_filtered_output(outputs: list[str], seed: int) -> None:
    choices = ChoiceSet(len(outputs))
    deltas = run(choices, interleaved(outputs, seed))
    for index, output in enumerate(outputs):
        assert text_of(deltas, index) == clean_and_strip_markers(output).text
        assert choices.choices[index].answer.content == text_of(deltas, index)
    finishes = [d for d in deltas if d.finish_reason]
    assert [d.index for d in finishes] == list(range(len(outputs)))
    assert deltas[-len(outputs):] == finishes  # nothing after a finish


def test_conformance_cases_side_by_side() -> None:
    outputs = [case["input"] for case in CASES[:6]]
    choices = ChoiceSet(len(outputs))
    deltas = run(choices, interleaved(outputs, 7))
    for index, case in enumerate(CASES[:6]):
        assert text_of(deltas, index) == case["text"]
        assert choices.metadata(index) == case["metadata"]


def test_tool_call_deltas_pass_untouched_and_merge() -> None:
    parts = [{"index": 0, "id": "call_1", "type": "function",
              "function": {"name": "f", "arguments": ""}},
             {"index": 0, "function": {"arguments": '{"a": "<!-- '}},
             {"index": 0, "function": {"arguments": 'x -->"}'}}]
    choices = ChoiceSet()
    deltas = run(choices, [ChoiceChunk((ChoicePiece(0, tool_calls=(p,)),)) for p in parts]
                 + [ChoiceChunk((ChoicePiece(0, finish_reason="tool_calls"),))])
    assert [d.tool_calls[0] for d in deltas if d.tool_calls] == parts
    assert choices.choices[0].tool_calls == [{"id": "call_1", "type": "function", "function": {
        "name": "f", "arguments": '{"a": "<!-- x -->"}'}}]
    assert deltas[-1] == ChoiceDelta(0, finish_reason="tool_calls")


def test_a_failure_flushes_held_text_and_sends_no_finish() -> None:
    choices = ChoiceSet(2)
    choices.feed(ChoiceChunk((ChoicePiece(0, "kept <!-- MET"), ChoicePiece(1, "two"))))
    tail = choices.fail(TurnFailure("upstream_truncated", "cut"), flush=True)
    assert all(d.finish_reason is None for d in tail)
    assert choices.choices[0].answer.content == "kept <!-- MET"
    assert choices.status == "failed"


def test_the_call_record_counts_every_choice() -> None:
    prices = PriceTable({"m": ModelPrice(1.0, 2.0)})
    ctx = CallContext("m", {}, prices)
    with_usage = ChoiceSet(2)
    with_usage.feed(ChoiceChunk((ChoicePiece(0, "a" * 40), ChoicePiece(1, "b" * 40)),
                                usage=ProviderUsage(10, 30, 40), model="m"))
    with_usage.end()
    record = with_usage.call_record(ctx, prompt=[{"role": "user", "content": "hi"}],
                                    started_at=NOW, first_token_at=NOW, finished_at=NOW)
    assert (record.prompt_tokens, record.completion_tokens, record.usage_source) == (
        10, 30, "provider")
    estimated = ChoiceSet(2)
    estimated.feed(ChoiceChunk((ChoicePiece(0, "a" * 40), ChoicePiece(1, "b" * 40))))
    estimated.end()
    record = estimated.call_record(ctx, prompt=[{"role": "user", "content": "hi"}],
                                   started_at=NOW, first_token_at=NOW, finished_at=NOW)
    assert (record.completion_tokens, record.usage_source) == (20, "estimated")
    assert record.cost_usd == prices.cost_usd("m", record.prompt_tokens, 20)
