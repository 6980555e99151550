"""The usage rollup: user_token_usage rows keyed by (user, period_type, period_start, model),
incremented with one atomic INSERT ... ON CONFLICT DO UPDATE SET x = x + excluded.x per model,
so concurrent writers never lose an increment (no read-modify-write in Python).

How a turn is counted (which call carries the message, how costs add) is a pure rule in
app.usage.figures, shared with the backfill; this module only writes what it says."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from sqlalchemy import func
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession

from app.clock import utcnow
from app.records import CallRecord
from app.store.models import UserTokenUsage
from app.usage.figures import UsageFigures, deltas_by_model

PERIOD_DAY = "day"


def utc_day(moment: dt.datetime) -> dt.date:
    """The UTC calendar day of an aware datetime (the rollup period)."""
    return moment.astimezone(dt.UTC).date()


async def add_to_rollup(
    s: AsyncSession, *, user_id: str, period_start: dt.date, model: str, delta: UsageFigures,
    period_type: str = PERIOD_DAY,
) -> None:
    """Atomically add delta to the (user, period, model) row, creating it if missing."""
    dialect = s.get_bind().dialect.name
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    row = insert(UserTokenUsage).values(
        user_id=user_id, period_type=period_type, period_start=period_start, model=model,
        total_tokens=delta.total_tokens, prompt_tokens=delta.prompt_tokens,
        completion_tokens=delta.completion_tokens, message_count=delta.message_count,
        llm_call_count=delta.llm_call_count,
        # the column takes floats (Numeric asdecimal=False); the exact sum converts once here
        cost_usd=None if delta.cost_usd is None else float(delta.cost_usd),
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
