"""Usage figures, the one shape every usage count takes, and the rule for counting a turn (pure).

The live rollup (what one finished turn adds), the backfill (what a day's llm_calls rows add up
to), the verification (rollup against raw rows) and the usage report all add up the same eight
figures. One type for all of them means the paths cannot drift apart in how they add: costs
are exact decimals at the rollup column's scale, and a cost nobody knows stays None, never 0.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal

from app.answer.records import CallRecord

#: The rollup column's scale: Numeric(18, 9).
COST_QUANTUM = Decimal("0.000000001")
USAGE_FIELDS = (
    "total_tokens", "prompt_tokens", "completion_tokens", "message_count", "llm_call_count",
    "cost_usd", "unpriced_call_count", "reasoning_tokens",
)
#: A daily rollup row's key: (user_id, UTC day, model).
RollupKey = tuple[str, dt.date, str]


def exact_cost(value: float | Decimal | None) -> Decimal | None:
    """A cost as an exact decimal at the rollup's scale (floats go through their repr, so
    0.1 is 0.1 and sums of many calls do not pick up binary rounding)."""
    if value is None:
        return None
    return Decimal(str(value)).quantize(COST_QUANTUM)


@dataclass(slots=True)
class UsageFigures:
    """Sums of usage: what one turn adds to a (user, day, model) row, a rollup row itself, or
    any sum of those. cost_usd is the sum of the known costs, None while no call was priced;
    unpriced_call_count says how many calls it is missing. reasoning_tokens are the part of
    completion_tokens the providers reported as reasoning (a call that reported none adds 0)."""

    total_tokens: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    message_count: int = 0
    llm_call_count: int = 0
    cost_usd: Decimal | None = None
    unpriced_call_count: int = 0
    reasoning_tokens: int = 0

    def add(self, other: UsageFigures) -> None:
        self.total_tokens += other.total_tokens
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        self.message_count += other.message_count
        self.llm_call_count += other.llm_call_count
        self.unpriced_call_count += other.unpriced_call_count
        self.reasoning_tokens += other.reasoning_tokens
        if other.cost_usd is not None:
            self.cost_usd = (self.cost_usd or Decimal(0)) + other.cost_usd

    def add_call(self, call: CallRecord) -> None:
        """Count one upstream call: its tokens, the call, and its cost or that it has none."""
        self.total_tokens += call.total_tokens
        self.prompt_tokens += call.prompt_tokens
        self.completion_tokens += call.completion_tokens
        self.llm_call_count += 1
        self.reasoning_tokens += call.reasoning_tokens or 0
        cost = exact_cost(call.cost_usd)
        if cost is None:
            self.unpriced_call_count += 1
        else:
            self.cost_usd = (self.cost_usd or Decimal(0)) + cost

    def as_dict(self) -> dict[str, int | float | None]:
        return {
            "total_tokens": self.total_tokens,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "message_count": self.message_count,
            "llm_call_count": self.llm_call_count,
            "cost_usd": None if self.cost_usd is None else float(self.cost_usd),
            "unpriced_call_count": self.unpriced_call_count,
            "reasoning_tokens": self.reasoning_tokens,
        }


def _call_order(call: CallRecord) -> tuple[dt.datetime, str, str]:
    """Pipeline order (title, then summary, then main all start one after the other), with
    ties broken by fields a stored row keeps, so a list and its rows read back agree."""
    return (call.started_at, call.stage, call.model)


def message_carriers(calls: Sequence[CallRecord]) -> list[CallRecord]:
    """The calls that carry the message count among the calls ONE finish wrote (one turn).

    Every `main` call carries one message (a turn makes at most one); a turn that ended
    before its main call (the client left during the title call) is still a message, carried
    by its earliest call. The live rollup applies this to the turn's calls, and the backfill
    to the llm_calls rows of one finish (app.usage.rollups), which a deleted thread
    leaves intact: the two cannot disagree, whatever happened to the message since."""
    mains = [call for call in calls if call.stage == "main"]
    if mains or not calls:
        return mains
    return [min(calls, key=_call_order)]


def deltas_by_model(calls: Sequence[CallRecord]) -> dict[str, UsageFigures]:
    """One turn's contribution per model: every call's tokens, cost and count; the message
    counted under its carrier's model (message_carriers)."""
    deltas: dict[str, UsageFigures] = {}
    for call in calls:
        deltas.setdefault(call.model, UsageFigures()).add_call(call)
    for carrier in message_carriers(calls):
        deltas[carrier.model].message_count += 1
    return deltas
