"""The report of a scan, fix or rollback: counts by rule, findings, a few before/after samples.

Pure bookkeeping; a repair run (app.repair.service) fills it batch by batch and the CLI
renders it (table or JSON).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal

from app.repair.plan import RepairPlan
from app.repair.rows import StoredMessage
from app.repair.rules import Diagnosis

Mode = Literal["scan", "apply"]
EXCERPT_CONTEXT = 40
EXCERPT_LIMIT = 240


@dataclass(frozen=True, slots=True)
class Finding:
    """One message that breaks a rule (to fix) or raises a notice (to report)."""

    message_id: str
    thread_id: str
    user_id: str
    role: str
    rules: tuple[str, ...]
    notices: tuple[str, ...]
    notes: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "message_id": self.message_id, "thread_id": self.thread_id,
            "user_id": self.user_id, "role": self.role, "rules": list(self.rules),
            "notices": list(self.notices), "notes": list(self.notes),
        }


@dataclass(frozen=True, slots=True)
class Sample:
    """A before/after excerpt around the first change of one repair."""

    message_id: str
    rule: str
    content_before: str
    content_after: str
    metadata_before: str
    metadata_after: str
    #: The reasoning a re-split moves out of the content (None: the column is left alone).
    reasoning_after: str | None = None

    def to_json(self) -> dict[str, Any]:
        body = {
            "message_id": self.message_id, "rule": self.rule,
            "content_before": self.content_before, "content_after": self.content_after,
            "metadata_before": self.metadata_before, "metadata_after": self.metadata_after,
        }
        if self.reasoning_after is not None:
            body["reasoning_after"] = self.reasoning_after
        return body


def _clip(text: str, limit: int = EXCERPT_LIMIT) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def changed_excerpts(before: str, after: str) -> tuple[str, str]:
    """Both texts cut to the region where they differ, with a little context on each side."""
    prefix = 0
    shortest = min(len(before), len(after))
    while prefix < shortest and before[prefix] == after[prefix]:
        prefix += 1
    suffix = 0
    while (suffix < shortest - prefix
           and before[len(before) - 1 - suffix] == after[len(after) - 1 - suffix]):
        suffix += 1
    start = max(0, prefix - EXCERPT_CONTEXT)
    lead = "…" if start else ""

    def cut(text: str) -> str:
        end = min(len(text), len(text) - suffix + EXCERPT_CONTEXT)
        tail = "…" if end < len(text) else ""
        return _clip(lead + text[start:end] + tail)

    return cut(before), cut(after)


def _json_text(value: Any) -> str:
    return _clip(json.dumps(value, ensure_ascii=False, sort_keys=True, default=str))


def make_sample(plan: RepairPlan) -> Sample:
    before, after = changed_excerpts(plan.message.content, plan.new_content)
    return Sample(
        str(plan.message.id), plan.rule, before, after,
        _json_text(plan.message.metadata), _json_text(plan.new_metadata),
        None if plan.new_reasoning is None else _clip(plan.new_reasoning),
    )


@dataclass(slots=True)
class RepairReport:
    """Totals of one run. `corrupt` counts rows to fix; `--check` fails when it is not zero."""

    mode: Mode
    max_samples: int = 5
    run_id: str | None = None
    total: int = 0
    scanned: int = 0
    batches: int = 0
    repaired: int = 0
    seconds: float = 0.0
    by_rule: Counter[str] = field(default_factory=Counter)
    notices: Counter[str] = field(default_factory=Counter)
    findings: list[Finding] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)

    @property
    def corrupt(self) -> int:
        return sum(1 for f in self.findings if f.rules)

    def record(
        self, message: StoredMessage, diagnosis: Diagnosis, plan: RepairPlan | None
    ) -> None:
        """Count one diagnosed message (clean ones are only counted as scanned)."""
        if diagnosis.is_clean:
            return
        self.by_rule.update(diagnosis.rules)
        self.notices.update(diagnosis.notices)
        notes = plan.notes if plan is not None else ()
        self.findings.append(Finding(
            str(message.id), str(message.thread_id), message.user_id, message.role,
            diagnosis.rules, diagnosis.notices, notes,
        ))
        if plan is not None and self._wants_sample(plan):
            self.samples.append(make_sample(plan))

    def _wants_sample(self, plan: RepairPlan) -> bool:
        """One sample per rule combination first, so the few diffs shown cover every kind."""
        if len(self.samples) >= self.max_samples:
            return False
        return all(sample.rule != plan.rule for sample in self.samples)

    def to_json(self) -> dict[str, Any]:
        return {
            "mode": self.mode, "run_id": self.run_id, "total_messages": self.total,
            "scanned": self.scanned, "batches": self.batches, "corrupt": self.corrupt,
            "repaired": self.repaired,
            "by_rule": dict(sorted(self.by_rule.items())),
            "notices": dict(sorted(self.notices.items())),
            "seconds": round(self.seconds, 3),
            "findings": [f.to_json() for f in self.findings],
            "samples": [s.to_json() for s in self.samples],
        }


@dataclass(slots=True)
class RollbackReport:
    """What a rollback restored, and what it left because the row changed after the repair."""

    run_id: str
    restored: int = 0
    already_rolled_back: int = 0
    conflicts: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id, "restored": self.restored,
            "already_rolled_back": self.already_rolled_back,
            "conflicts": self.conflicts, "seconds": round(self.seconds, 3),
        }
