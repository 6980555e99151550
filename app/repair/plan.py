"""The fix for a diagnosed message: new content, metadata and synthetic columns (pure).

Content is what the MarkerFilter makes of the stored text: the one implementation the gateway
uses, so a repaired row is exactly what the gateway would store today.

Reasoning (spec v1.2): a stored content is the answer side already. The gateway split any
leading `<think>` block off before it stored the row, and a row whose text begins with a
literal `<think>` showed it as text; splitting it again would take words the user saw. So by
default the content is re-derived as the split's content channel in format `none` (the marker
rules alone, which is strip_markers), and the row's reasoning column is left as it is. Only a
run asked to re-split (rule `reasoning_split`, rows stored before the split, with no
reasoning) writes the split's two channels: the content, and the reasoning column. A run
asked to read inline tool calls (rule `tool_call_split`) writes the content without them and
the calls into `metadata.tool_calls`, each with an id, as the gateway stores them today.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.answer.choices import tool_call_object
from app.repair.rows import Resplit, StoredMessage
from app.repair.rules import (
    LEGACY_SYNTHETIC,
    REASONING_SPLIT,
    TOOL_CALL_SPLIT,
    Diagnosis,
    diagnose,
    legacy_trigger,
)


@dataclass(frozen=True, slots=True)
class RepairPlan:
    """What `fix` writes for one message (the old values are copied by the store)."""

    message: StoredMessage
    rules: tuple[str, ...]
    new_content: str
    new_metadata: dict[str, Any]
    synthetic: bool
    trigger_type: str | None
    notes: tuple[str, ...] = ()
    #: The reasoning column to write (rule `reasoning_split`); None leaves it as it is.
    new_reasoning: str | None = None

    @property
    def rule(self) -> str:
        """The rules as one string, as message_repairs.rule stores them."""
        return ",".join(self.rules)


def _as_object(metadata: Any) -> dict[str, Any]:
    return dict(metadata) if isinstance(metadata, dict) else {}


def _is_empty(value: Any) -> bool:
    return value is None or value == {} or value == [] or value == ""


def _plan_markers(message: StoredMessage, diagnosis: Diagnosis) -> RepairPlan:
    """The marker rules' fix; with `reasoning_split`, the content and metadata are the
    split's (a METADATA inside the thinking is not the answer's, as the gateway has it)."""
    split = diagnosis.split
    assert diagnosis.filtered is not None or split is not None
    metadata = _as_object(message.metadata)
    notes: list[str] = []
    extracted = (split.metadata if split is not None
                 else diagnosis.filtered.metadata if diagnosis.filtered is not None else None)
    if extracted:
        if _is_empty(metadata.get("response_metadata")):
            metadata["response_metadata"] = extracted
        elif metadata["response_metadata"] != extracted:
            notes.append("extracted metadata dropped: response_metadata already set")
    if split is not None:
        if TOOL_CALL_SPLIT in diagnosis.rules:
            metadata["tool_calls"] = [tool_call_object(call) for call in split.tool_calls]
        reasoning = split.reasoning if REASONING_SPLIT in diagnosis.rules else None
        return RepairPlan(message, diagnosis.rules, split.text, metadata, message.synthetic,
                          message.trigger_type, tuple(notes), reasoning)
    assert diagnosis.filtered is not None
    return RepairPlan(
        message, diagnosis.rules, diagnosis.filtered.text, metadata,
        message.synthetic, message.trigger_type, tuple(notes),
    )


def _plan_legacy_synthetic(message: StoredMessage) -> RepairPlan:
    trigger_type, reason = legacy_trigger(message.content)
    metadata = _as_object(message.metadata)
    metadata["synthetic"] = True
    metadata["trigger_type"] = trigger_type
    metadata.setdefault("trigger_reason", reason)
    return RepairPlan(
        message, (LEGACY_SYNTHETIC,), message.content, metadata, True, trigger_type
    )


def plan_repair(message: StoredMessage, diagnosis: Diagnosis | None = None,
                resplit: Resplit | None = None) -> RepairPlan | None:
    """The fix for a message, or None when there is nothing to fix (notices never change it)."""
    diagnosis = diagnosis if diagnosis is not None else diagnose(message, resplit)
    if not diagnosis.needs_fix:
        return None
    if LEGACY_SYNTHETIC in diagnosis.rules:
        return _plan_legacy_synthetic(message)
    return _plan_markers(message, diagnosis)
