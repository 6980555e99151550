"""What a turn records about itself: stage timings and one record per upstream call, turned
into the message metadata (the shape operators query) and the llm_calls rows.

Stages before the main call (title, summary, retrieval) time themselves with `stage()` and
add their calls with `add_call()`; totals follow without changes here: `metadata.tokens` is
the sum over every call of the turn, and `cost_usd` is null as soon as one call is unpriced
(unknown is not zero)."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from app.answer.records import CallRecord, UsageSource
from app.core.clock import utcnow


@dataclass
class TurnRecorder:
    """Timings and calls of one turn (monotonic seconds for durations, UTC for records)."""

    started: float = field(default_factory=time.monotonic)
    stages: dict[str, int] = field(default_factory=dict)
    calls: list[CallRecord] = field(default_factory=list)
    first_token: float | None = None
    first_token_at: dt.datetime | None = None

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
            self.first_token_at = utcnow()

    @property
    def ttft_ms(self) -> int | None:
        if self.first_token is None:
            return None
        return round((self.first_token - self.started) * 1000)

    def elapsed_ms(self) -> int:
        return round((time.monotonic() - self.started) * 1000)

    def main_call(self) -> CallRecord | None:
        """The last `main` call: the one that answered (earlier ones failed or were
        continued)."""
        return next((call for call in reversed(self.calls) if call.stage == "main"), None)

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
