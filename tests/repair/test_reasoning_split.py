"""The `reasoning_split` repair (pure): an answer a gateway from before the reasoning split
stored with its thinking as text is split again by the one split, only when asked, only for
rows without reasoning, only a block that closes; repairing twice changes nothing."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from app.repair import REASONING_SPLIT, Resplit, StoredMessage, diagnose, plan_repair
from app.repair.rules import CLEAN
from app.stream import strip_markers
from app.stream.reasoning import REASONING_UNCLOSED
from tests.repair.test_rules import message
from tests.stream.test_reasoning_conformance import CASES


def stored_before_the_split(case: dict[str, Any]) -> str:
    """What a gateway without the split stored for the case's answer: the marker filter's
    text of the whole content (thinking included)."""
    return strip_markers(case["input"]).text


def movable(case: dict[str, Any]) -> bool:
    """Cases whose stored text still tells the thinking apart: a block that closes, no
    reasoning field (never stored by the old gateway) and no marker ahead of the block (the
    old filter removed it, so the stored text begins with a `<think>` the spec calls text:
    the repair cannot know; the operator's --before keeps it to old rows)."""
    return (case.get("reasoning_format", "think") != "none" and not case.get("reasoning_input")
            and REASONING_UNCLOSED not in case["warnings"]
            and "context_echo" not in case["warnings"])


MOVABLE = [c for c in CASES if movable(c)]


@pytest.mark.parametrize("case", MOVABLE, ids=[c["id"] for c in MOVABLE])
def test_a_stored_thinking_block_moves_to_the_reasoning_as_the_gateway_splits_today(
    case: dict[str, Any]
) -> None:
    stored = message(stored_before_the_split(case))
    resplit = Resplit(case.get("reasoning_format", "think"))
    diagnosis = diagnose(stored, resplit)
    plan = plan_repair(stored, diagnosis)
    if not case["reasoning"] and case["text"] == stored.content:
        assert plan is None, case["id"]  # no leading block: nothing to move
        return
    assert plan is not None and REASONING_SPLIT in plan.rules, case["id"]
    assert (plan.new_content, plan.new_reasoning) == (case["text"], case["reasoning"])
    again = dataclasses.replace(stored, content=plan.new_content, reasoning=plan.new_reasoning)
    assert plan_repair(again, resplit=resplit) is None  # a second run finds nothing


def test_nothing_is_resplit_unless_asked() -> None:
    stored = message("<think>plan</think>Answer.")
    assert diagnose(stored) == CLEAN
    assert diagnose(stored, Resplit("none")) == CLEAN
    assert REASONING_SPLIT in diagnose(stored, Resplit()).rules


@pytest.mark.parametrize("stored", [
    dataclasses.replace(message("<think>plan</think>Answer."), reasoning="already split"),
    message("<think>cut off before it closed"),
    message("Use <think>x</think> tags."),
    message("<think>plan</think>Answer.", role="user"),
], ids=["has-reasoning", "unclosed", "not-leading", "user"])
def test_rows_left_as_they_are(stored: StoredMessage) -> None:
    assert REASONING_SPLIT not in diagnose(stored, Resplit()).rules


def test_the_tag_and_the_prefilled_format_are_the_gateways() -> None:
    prefilled = message("weighing it</think>Answer.")
    assert diagnose(prefilled, Resplit()) == CLEAN  # `think` sees no leading block
    plan = plan_repair(prefilled, resplit=Resplit("think-prefilled"))
    assert plan is not None and (plan.new_content, plan.new_reasoning) == (
        "Answer.", "weighing it")
    tagged = message("<reflect>hmm</reflect>Yes.")
    plan = plan_repair(tagged, resplit=Resplit("think", "reflect"))
    assert plan is not None and (plan.new_content, plan.new_reasoning) == ("Yes.", "hmm")


def test_markers_and_the_split_in_one_repair_keep_the_answers_metadata() -> None:
    stored = message('<think>draft <!-- METADATA: {"language": "de"} --> ok</think>'
                     'Final. <!-- METADATA: {"language": "en"} -->', metadata={"tokens": 3})
    plan = plan_repair(stored, resplit=Resplit())
    assert plan is not None
    assert plan.rules == ("marker_header", REASONING_SPLIT)
    assert (plan.new_content, plan.new_reasoning) == ("Final.", "draft  ok")
    assert plan.new_metadata == {"tokens": 3, "response_metadata": {"language": "en"}}
