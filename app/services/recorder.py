"""What a turn records about itself: stage timings and one record per upstream call, turned
into the message metadata (the shape operators query) and the llm_calls rows.

Later stages (title, summary, retrieval) time themselves with `stage()` and add their calls
with `add_call()`; totals and the metadata follow without changes here: `metadata.tokens`
is the sum over every call of the turn, and `cost_usd` is null as soon as one call is
unpriced (unknown is not zero)."""

from __future__ import annotations

import datetime
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

from app.store.records import LlmCallRecord

UsageSource = Literal["provider", "estimated", "partial"]
CallStatus = Literal["complete", "interrupted", "failed"]


@dataclass
class CallRecord:
    """One upstream call as measured by the gateway."""

    stage: str
    description: str
    model: str
    request: dict[str, Any]
    started_at: datetime.datetime
    finished_at: datetime.datetime
    first_token_at: datetime.datetime | None
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float | None
    usage_source: UsageSource
    status: CallStatus
    error: str | None = None
    #: Stage-specific facts kept with the call's metadata entry (e.g. what a summary covers).
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @property
    def duration_ms(self) -> int:
        return _ms(self.finished_at - self.started_at)

    @property
    def ttft_ms(self) -> int | None:
        if self.first_token_at is None:
            return None
        return _ms(self.first_token_at - self.started_at)

    def as_store_record(self) -> LlmCallRecord:
        return LlmCallRecord(
            stage=self.stage, model=self.model, prompt_tokens=self.prompt_tokens,
            completion_tokens=self.completion_tokens, total_tokens=self.total_tokens,
            cost_usd=self.cost_usd, usage_source=self.usage_source,
            started_at=self.started_at, first_token_at=self.first_token_at,
            finished_at=self.finished_at, duration_ms=self.duration_ms,
            status=self.status, error=self.error,
        )

    def as_metadata(self) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "stage": self.stage,
            "description": self.description,
            "request": self.request,
            "response": {"usage": {
                "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens,
                "total_tokens": self.total_tokens,
            }},
            "usage_source": self.usage_source,
            "cost_usd": self.cost_usd,
            "status": self.status,
            "error": self.error,
            "timestamp": iso_utc(self.started_at),
            "ttft_ms": self.ttft_ms,
            "duration_ms": self.duration_ms,
        }
        if self.details:
            entry["details"] = dict(self.details)
        return entry


def _ms(delta: datetime.timedelta) -> int:
    return round(delta.total_seconds() * 1000)


def iso_utc(moment: datetime.datetime) -> str:
    """`2026-11-22T10:31:52.399Z`."""
    text = moment.astimezone(datetime.UTC).isoformat(timespec="milliseconds")
    return text.replace("+00:00", "Z")


def utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


@dataclass
class TurnRecorder:
    """Timings and calls of one turn."""

    started: float = field(default_factory=time.monotonic)
    stages: dict[str, int] = field(default_factory=dict)
    calls: list[CallRecord] = field(default_factory=list)
    first_token: float | None = None

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Adds the block's wall time in ms to `pipeline_stages[name]`."""
        begin = time.monotonic()
        try:
            yield
        finally:
            elapsed = round((time.monotonic() - begin) * 1000)
            self.stages[name] = self.stages.get(name, 0) + elapsed

    def add_call(self, call: CallRecord) -> None:
        self.calls.append(call)

    def mark_first_token(self) -> None:
        if self.first_token is None:
            self.first_token = time.monotonic()

    @property
    def ttft_ms(self) -> int | None:
        if self.first_token is None:
            return None
        return round((self.first_token - self.started) * 1000)

    def elapsed_ms(self) -> int:
        return round((time.monotonic() - self.started) * 1000)

    def main_call(self) -> CallRecord | None:
        return next((call for call in self.calls if call.stage == "main"), None)

    def totals(self) -> dict[str, Any]:
        """Token and cost totals over every call of the turn (cost None if any is unknown)."""
        prompt = sum(call.prompt_tokens for call in self.calls)
        completion = sum(call.completion_tokens for call in self.calls)
        costs = [call.cost_usd for call in self.calls]
        cost = None if any(c is None for c in costs) else round(sum(c or 0.0 for c in costs), 8)
        return {
            "tokens": prompt + completion,
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "cost_usd": cost,
            "usage_source": self.usage_source(),
        }

    def usage_source(self) -> UsageSource:
        """The message's source: its `main` call's. A turn that ended before its main call
        (the client left during the title call, a failure first, a turn never started) is
        `partial` whatever its side calls say: its figures cover only the calls made, down
        to an exact 0 when none was, and must not read as an estimate of a whole turn."""
        main = self.main_call()
        return main.usage_source if main else "partial"
