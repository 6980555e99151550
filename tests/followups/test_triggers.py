"""Pure parts: trigger prompts and mapping, reasons, autonomy validation, cap, query source."""

from __future__ import annotations

from typing import Any

import pytest

from app.followups.autonomy import (
    Autonomy,
    InvalidAutonomy,
    cap_reached,
    effective,
    validate_patch,
)
from app.followups.recall_query import choose_query_source
from app.followups.triggers import (
    TRIGGER_PROMPTS,
    awaiting_of,
    prompt_for,
    trigger_for_awaiting,
    trigger_reason,
)

DEFAULTS = Autonomy(enabled=False, idle_seconds=300, max_followups=2)


def test_prompts_are_exactly_the_issue_table() -> None:
    assert TRIGGER_PROMPTS == {
        "check_in": "Continue our conversation naturally.",
        "question_unanswered":
            "The user asked a question but hasn't responded. Follow up on it.",
        "task_incomplete": "Check in about the incomplete task we discussed.",
        "waiting_for_decision": "Follow up on the decision the user needs to make.",
    }
    assert prompt_for("task_incomplete") == TRIGGER_PROMPTS["task_incomplete"]
    assert prompt_for("no-such-trigger") == TRIGGER_PROMPTS["check_in"]


@pytest.mark.parametrize(("metadata", "trigger"), [
    ({"awaiting": "question"}, "question_unanswered"),
    ({"awaiting": "decision"}, "waiting_for_decision"),
    ({"awaiting": "task"}, "task_incomplete"),
    ({"awaiting": None}, "check_in"),
    ({"awaiting": "QUESTION"}, "check_in"),
    ({"awaiting": ["question"]}, "check_in"),
    ({}, "check_in"),
    (None, "check_in"),
    ("awaiting", "check_in"),
])
def test_trigger_comes_from_metadata_awaiting(metadata: Any, trigger: str) -> None:
    assert trigger_for_awaiting(awaiting_of(metadata)) == trigger


def test_reason_says_why_in_words() -> None:
    assert trigger_reason(300, "decision") == (
        "No activity for 300 seconds; assistant awaited a decision")
    assert trigger_reason(1, "question") == (
        "No activity for 1 second; assistant awaited an answer to a question")
    assert trigger_reason(60, "task") == (
        "No activity for 60 seconds; assistant awaited a task to be done")
    assert trigger_reason(60, None) == "No activity for 60 seconds; checking in"


@pytest.mark.parametrize("patch", [
    {"enabled": True}, {"idle_seconds": 1}, {"max_followups": 0},
    {"enabled": False, "idle_seconds": 2_592_000, "max_followups": 100},
])
def test_valid_patches(patch: dict[str, Any]) -> None:
    assert validate_patch(patch) == patch


@pytest.mark.parametrize("patch", [
    None, [], "on", {}, {"enabled": "true"}, {"enabled": 1}, {"idle_seconds": 0},
    {"idle_seconds": 1.5}, {"idle_seconds": True}, {"idle_seconds": "5"},
    {"max_followups": -1}, {"max_followups": 101}, {"max_followups": None}, {"extra": 1},
])
def test_invalid_patches(patch: Any) -> None:
    with pytest.raises(InvalidAutonomy):
        validate_patch(patch)


def test_effective_settings_fall_back_to_defaults() -> None:
    assert effective(None, DEFAULTS) == DEFAULTS
    assert effective({"enabled": True}, DEFAULTS) == Autonomy(True, 300, 2)
    assert effective({"enabled": "yes", "idle_seconds": -3, "max_followups": 5}, DEFAULTS) == (
        Autonomy(False, 300, 5))


def test_cap() -> None:
    assert not cap_reached(0, 1)
    assert cap_reached(1, 1)
    assert cap_reached(0, 0)
    assert not cap_reached(1, 2)


def test_query_source_order() -> None:
    real = choose_query_source(current_text="zeppelins?", current_is_synthetic=False,
                               last_real_user_text="older", summary="sum")
    assert real is not None and (real.name, real.text) == ("current_message", "zeppelins?")
    synthetic = choose_query_source(current_text="Continue our conversation naturally.",
                                    current_is_synthetic=True, last_real_user_text="older",
                                    summary="sum")
    assert synthetic is not None and synthetic.name == "last_user_message"
    summary = choose_query_source(current_text="x", current_is_synthetic=True,
                                  last_real_user_text=None, summary="sum")
    assert summary is not None and (summary.name, summary.text) == ("summary", "sum")
    assert choose_query_source(current_text="x", current_is_synthetic=True,
                               last_real_user_text="  ", summary=None) is None
