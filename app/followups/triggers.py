"""Follow-up trigger types, their exact prompts, and why a follow-up was scheduled. Pure.

The trigger comes from the finished reply's METADATA `awaiting`: what the assistant was waiting
for decides what the synthetic prompt asks the model to do when the user stays silent."""

from __future__ import annotations

from typing import Any, Final, Literal

TriggerType = Literal[
    "check_in", "question_unanswered", "task_incomplete", "waiting_for_decision"
]

#: The natural prompt sent as the synthetic user message, per trigger (docs/followups.md).
TRIGGER_PROMPTS: Final[dict[TriggerType, str]] = {
    "check_in": "Continue our conversation naturally.",
    "question_unanswered": "The user asked a question but hasn't responded. Follow up on it.",
    "task_incomplete": "Check in about the incomplete task we discussed.",
    "waiting_for_decision": "Follow up on the decision the user needs to make.",
}

_TRIGGER_BY_AWAITING: Final[dict[str, TriggerType]] = {
    "question": "question_unanswered",
    "decision": "waiting_for_decision",
    "task": "task_incomplete",
}

_AWAITED_WORDS: Final[dict[str, str]] = {
    "question": "assistant awaited an answer to a question",
    "decision": "assistant awaited a decision",
    "task": "assistant awaited a task to be done",
}


def awaiting_of(response_metadata: Any) -> str | None:
    """The reply's METADATA `awaiting` value when it is one we know, else None."""
    if not isinstance(response_metadata, dict):
        return None
    value = response_metadata.get("awaiting")
    return value if isinstance(value, str) and value in _TRIGGER_BY_AWAITING else None


def trigger_for_awaiting(awaiting: str | None) -> TriggerType:
    """question -> question_unanswered, decision -> waiting_for_decision,
    task -> task_incomplete, anything else -> check_in."""
    if awaiting is None:
        return "check_in"
    return _TRIGGER_BY_AWAITING.get(awaiting, "check_in")


def trigger_reason(idle_seconds: int, awaiting: str | None) -> str:
    """Why, in words: "No activity for 300 seconds; assistant awaited a decision"."""
    unit = "second" if idle_seconds == 1 else "seconds"
    idle = f"No activity for {idle_seconds} {unit}"
    awaited = _AWAITED_WORDS.get(awaiting or "")
    return f"{idle}; {awaited}" if awaited else f"{idle}; checking in"


def prompt_for(trigger_type: str) -> str:
    """The synthetic prompt of a stored trigger type (an unknown one checks in)."""
    for known, prompt in TRIGGER_PROMPTS.items():
        if known == trigger_type:
            return prompt
    return TRIGGER_PROMPTS["check_in"]
