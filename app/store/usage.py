"""The usage rollup: user_token_usage rows keyed by (user, period_type, period_start, model),
incremented with one atomic INSERT ... ON CONFLICT DO UPDATE SET x = x + excluded.x per model,
so concurrent writers never lose an increment (no read-modify-write in Python)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import func
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession

from app.clock import utcnow
from app.store.models import UserTokenUsage
from app.turns.records import CallRecord

PERIOD_DAY = "day"


@dataclass(slots=True)
class UsageDelta:
    """What one turn adds to one (user, day, model) row."""

    total_tokens: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    message_count: int = 0
    llm_call_count: int = 0
    cost_usd: float | None = None
    unpriced_call_count: int = 0

    def add_call(self, call: CallRecord) -> None:
        self.total_tokens += call.total_tokens
        self.prompt_tokens += call.prompt_tokens
        self.completion_tokens += call.completion_tokens
        self.llm_call_count += 1
        if call.cost_usd is None:
            self.unpriced_call_count += 1
        else:
            self.cost_usd = (self.cost_usd or 0.0) + call.cost_usd


def _call_order(call: CallRecord) -> tuple[dt.datetime, str, str]:
    """Pipeline order (title, then summary, then main all start one after the other), with
    ties broken by fields a stored row keeps, so a list and its rows read back agree."""
    return (call.started_at, call.stage, call.model)


def message_carriers(calls: Sequence[CallRecord]) -> list[CallRecord]:
    """The calls that carry the message count among the calls ONE finish wrote (one turn).

    Every `main` call carries one message (a turn makes at most one); a turn that ended
    before its main call (the client left during the title call) is still a message, carried
    by its earliest call. The live rollup applies this to the turn's calls, and the backfill
    to the llm_calls rows of one finish (app.store.usage_reports), which a deleted thread
    leaves intact: the two cannot disagree, whatever happened to the message since."""
    mains = [call for call in calls if call.stage == "main"]
    if mains or not calls:
        return mains
    return [min(calls, key=_call_order)]


def deltas_by_model(calls: Sequence[CallRecord]) -> dict[str, UsageDelta]:
    """One turn's contribution per model: every call's tokens, cost and count; the message
    counted under its carrier's model (message_carriers)."""
    deltas: dict[str, UsageDelta] = {}
    for call in calls:
        deltas.setdefault(call.model, UsageDelta()).add_call(call)
    for carrier in message_carriers(calls):
        deltas[carrier.model].message_count += 1
    return deltas


def utc_day(moment: dt.datetime) -> dt.date:
    """The UTC calendar day of an aware datetime (the rollup period)."""
    return moment.astimezone(dt.UTC).date()


async def add_to_rollup(
    s: AsyncSession, *, user_id: str, period_start: dt.date, model: str, delta: UsageDelta,
    period_type: str = PERIOD_DAY,
) -> None:
    """Atomically add delta to the (user, period, model) row, creating it if missing."""
    dialect = s.get_bind().dialect.name
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    row = insert(UserTokenUsage).values(
        user_id=user_id, period_type=period_type, period_start=period_start, model=model,
        total_tokens=delta.total_tokens, prompt_tokens=delta.prompt_tokens,
        completion_tokens=delta.completion_tokens, message_count=delta.message_count,
        llm_call_count=delta.llm_call_count, cost_usd=delta.cost_usd,
        unpriced_call_count=delta.unpriced_call_count, updated_at=utcnow(),
    )
    t, new = UserTokenUsage, row.excluded
    await s.execute(
        row.on_conflict_do_update(
            index_elements=["user_id", "period_type", "period_start", "model"],
            set_={
                "total_tokens": t.total_tokens + new.total_tokens,
                "prompt_tokens": t.prompt_tokens + new.prompt_tokens,
                "completion_tokens": t.completion_tokens + new.completion_tokens,
                "message_count": t.message_count + new.message_count,
                "llm_call_count": t.llm_call_count + new.llm_call_count,
                # NULL + x is NULL: keep whichever side is known, the sum when both are.
                "cost_usd": func.coalesce(t.cost_usd + new.cost_usd, t.cost_usd, new.cost_usd),
                "unpriced_call_count": t.unpriced_call_count + new.unpriced_call_count,
                "updated_at": new.updated_at,
            },
        )
    )


async def record_turn_usage(
    s: AsyncSession, *, user_id: str, day: dt.date, calls: Sequence[CallRecord]
) -> None:
    """Add one finished turn's calls to the daily rollup (one upsert per model)."""
    for model, delta in sorted(deltas_by_model(calls).items()):
        await add_to_rollup(s, user_id=user_id, period_start=day, model=model, delta=delta)
