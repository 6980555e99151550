"""The usage rollup: user_token_usage rows keyed by (user, period_type, period_start, model),
incremented with one atomic INSERT ... ON CONFLICT DO UPDATE SET x = x + excluded.x per model,
so concurrent writers never lose an increment (no read-modify-write in Python).

How a turn is counted (which call carries the message, how costs add) is a pure rule in
app.usage.figures, shared with the backfill; this module only writes what it says."""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Executable, func
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession

from app.clock import utcnow
from app.records import CallRecord
from app.store.models import UserTokenUsage, table_of
from app.usage.figures import UsageFigures, deltas_by_model

PERIOD_DAY = "day"


def utc_day(moment: dt.datetime) -> dt.date:
    """The UTC calendar day of an aware datetime (the rollup period)."""
    return moment.astimezone(dt.UTC).date()


#: The rollup columns a delta adds to; every other column keys the row or is set.
_SUMMED = ("total_tokens", "prompt_tokens", "completion_tokens", "message_count",
           "llm_call_count", "unpriced_call_count")


@functools.cache
def _rollup_upsert(dialect: str) -> Executable:
    """The upsert, built once per dialect: building it (its `excluded` alias, its SET clause)
    costs more CPU than running it, and only its parameters change from turn to turn."""
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    table = table_of(UserTokenUsage)
    row = insert(table)
    t, new = table.c, row.excluded
    set_: dict[str, Any] = {name: t[name] + new[name] for name in _SUMMED}
    # NULL + x is NULL: keep whichever side is known, the sum when both are.
    set_["cost_usd"] = func.coalesce(t.cost_usd + new.cost_usd, t.cost_usd, new.cost_usd)
    set_["updated_at"] = new.updated_at
    return row.on_conflict_do_update(
        index_elements=["user_id", "period_type", "period_start", "model"], set_=set_)


async def add_to_rollup(
    s: AsyncSession, *, user_id: str, period_start: dt.date, model: str, delta: UsageFigures,
    period_type: str = PERIOD_DAY,
) -> None:
    """Atomically add delta to the (user, period, model) row, creating it if missing."""
    await s.execute(_rollup_upsert(s.get_bind().dialect.name), {
        "user_id": user_id, "period_type": period_type, "period_start": period_start,
        "model": model, **{name: getattr(delta, name) for name in _SUMMED},
        # the column takes floats (Numeric asdecimal=False); the exact sum converts once here
        "cost_usd": None if delta.cost_usd is None else float(delta.cost_usd),
        "updated_at": utcnow(),
    })


async def record_turn_usage(
    s: AsyncSession, *, user_id: str, day: dt.date, calls: Sequence[CallRecord]
) -> None:
    """Add one finished turn's calls to the daily rollup (one upsert per model)."""
    for model, delta in sorted(deltas_by_model(calls).items()):
        await add_to_rollup(s, user_id=user_id, period_start=day, model=model, delta=delta)
