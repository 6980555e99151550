"""The seam of a continued answer: a call cut after any chunk, then a call that goes on
exactly from what was said, through a fresh filter. The client's deltas, the stored text
and the metadata are those of the whole answer read in one go: no gap, no repeat, no
marker, whatever the first filter held back at the cut."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from app.answer.answer import CONTINUED, AnswerStream
from app.answer.continuation import (
    CONTINUE_INSTRUCTION,
    continuable,
    continuation_messages,
)
from app.answer.events import TurnFailure
from app.answer.inputs import UpstreamChunk
from app.demo_llm.scenarios import ChatInput, continue_reply, plan_reply
from app.stream import strip_markers

CASES_FILE = Path(__file__).parents[1] / "stream" / "conformance" / "markers.jsonl"
#: The conformance answers short enough to cut at every character (each cut looks for
#: its continuation's start by stripping every prefix).
CASES: list[dict[str, Any]] = [
    case for line in CASES_FILE.read_text(encoding="utf-8").splitlines() if line
    for case in [json.loads(line)] if len(case["input"]) <= 200]
CUT = TurnFailure("upstream_truncated", "cut")


def exact_rest(raw: str, said: str) -> str:
    """What a model that goes on exactly where it was cut writes (the demo model's rule)."""
    return next(raw[k:] for k in range(len(raw) + 1) if strip_markers(raw[:k]).text == said)


def continued(first: list[str], rest: list[str]) -> tuple[AnswerStream, str]:
    """The answer of `first` (then cut) and `rest`, and the text its deltas showed."""
    answer, shown = AnswerStream(), []
    for chunk in first:
        if delta := answer.feed(UpstreamChunk(chunk)):
            shown.append(delta.text)
    answer.fail(CUT, flush=False)
    answer.reopen()
    for chunk in rest:
        if delta := answer.feed(UpstreamChunk(chunk)):
            shown.append(delta.text)
    if delta := answer.end():
        shown.append(delta.text)
    return answer, "".join(shown)


@pytest.mark.parametrize("case", CASES, ids=[case["id"] for case in CASES])
def test_a_cut_after_any_character_of_a_conformance_answer_joins_seamlessly(
        case: dict[str, Any]) -> None:
    raw = case["input"]
    for cut in range(len(raw) + 1):
        said = _said(raw[:cut])
        answer, shown = continued(list(raw[:cut]), list(exact_rest(raw, said)))
        assert shown == answer.content == case["text"], f"cut at {cut}"
        assert (answer.metadata or None) == (case["metadata"] or None), f"cut at {cut}"
        assert answer.status == "complete" and CONTINUED in answer.warning_names


def _said(first: str) -> str:
    """What a filter fed `first` one character at a time has shown (not what it holds)."""
    answer = AnswerStream()
    for char in first:
        answer.feed(UpstreamChunk(char))
    return answer.content


def test_the_demo_answer_cut_after_each_of_its_chunks() -> None:
    reply = plan_reply(ChatInput(system="", user_text="tell me about seams"))
    whole = strip_markers(reply.text)
    for cut in range(len(reply.pieces) + 1):
        said = _said_chunks(list(reply.pieces[:cut]))
        rest = continue_reply(reply, said).pieces
        answer, shown = continued(list(reply.pieces[:cut]), list(rest))
        assert shown == answer.content == whole.text, f"cut after chunk {cut}"
        assert answer.metadata == whole.metadata


def _said_chunks(chunks: list[str]) -> str:
    answer = AnswerStream()
    for chunk in chunks:
        answer.feed(UpstreamChunk(chunk))
    return answer.content


def test_what_the_first_filter_held_is_not_said_but_shown_if_no_call_continues() -> None:
    answer = AnswerStream()
    shown = [d.text for c in ("Hello ", "there <!-- MET") if (d := answer.feed(UpstreamChunk(c)))]
    answer.fail(CUT, flush=False)
    assert "".join(shown) == answer.said() == "Hello there"
    last = answer.fail(CUT, flush=True)  # no continuation came: resolved as at any failure
    assert last is not None and answer.content == "Hello there <!-- MET"


def test_the_continuation_request() -> None:
    prompt = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]
    assert continuation_messages(prompt, "") == prompt
    assert continuation_messages(prompt, "Half an ans") == [
        *prompt, {"role": "assistant", "content": "Half an ans"},
        {"role": "system", "content": CONTINUE_INSTRUCTION}]
    assert continuable("upstream_truncated", None) and continuable("upstream_error", 503)
    assert not continuable("upstream_error", 400) and not continuable("answer_too_long", None)
