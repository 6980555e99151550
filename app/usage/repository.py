"""The usage rollup: user_token_usage rows keyed by (user, period_type, period_start, model)
and a shard, incremented with one atomic INSERT ... ON CONFLICT DO UPDATE SET x = x + excluded.x
per model, so concurrent writers never lose an increment (no read-modify-write in Python).

A (user, period, model) rollup is the sum of its shards' rows: every reader sums them. The
finishes of a process take the shards in turn (app.usage.shards), so one busy user's finishes
running at once each lock a different row: the upsert holds its row's lock until its
commit, and with one row per user they took turns, in a process and across processes.

How a turn is counted (which call carries the message, how costs add) is a pure rule in
app.usage.figures, shared with the backfill; this module only writes what it says."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from sqlalchemy import bindparam, func, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.types import NullType

from app.answer.records import CallRecord
from app.core.clock import utcnow
from app.store.models import UserTokenUsage, table_of
from app.store.per_database import UpsertT
from app.usage.figures import UsageFigures, deltas_by_model

PERIOD_DAY = "day"
_USAGE = table_of(UserTokenUsage)

def utc_day(moment: dt.datetime) -> dt.date:
    """The UTC calendar day of an aware datetime (the rollup period)."""
    return moment.astimezone(dt.UTC).date()


#: The rollup columns a delta adds to; every other column keys the row or is set.
_SUMMED = ("total_tokens", "prompt_tokens", "completion_tokens", "message_count",
           "llm_call_count", "unpriced_call_count", "reasoning_tokens")


#: A rollup row's columns as an upsert writes them, the user first.
ROLLUP_COLUMNS = ("user_id", "period_type", "period_start", "model", "shard", *_SUMMED,
                  "cost_usd", "updated_at")


def adding_on_conflict(row: UpsertT) -> UpsertT:
    """The INSERT `row`, adding its figures to the (user, period, model, shard) row when that
    row exists already: the rollup's one rule, which each database's upsert of a turn's usage
    (app.turn.rows) is built with."""
    t, new = table_of(UserTokenUsage).c, row.excluded
    set_: dict[str, Any] = {name: t[name] + new[name] for name in _SUMMED}
    # NULL + x is NULL: keep whichever side is known, the sum when both are.
    set_["cost_usd"] = func.coalesce(t.cost_usd + new.cost_usd, t.cost_usd, new.cost_usd)
    set_["updated_at"] = new.updated_at
    return row.on_conflict_do_update(
        index_elements=["user_id", "period_type", "period_start", "model", "shard"],
        set_=set_)


def _rollup_values(*, period_start: dt.date, model: str, shard: int, delta: UsageFigures,
                   period_type: str = PERIOD_DAY) -> dict[str, Any]:
    """An upsert's values but the user's."""
    return {
        "period_type": period_type, "period_start": period_start, "model": model,
        "shard": shard,
        **{name: getattr(delta, name) for name in _SUMMED},
        # the column takes floats (Numeric asdecimal=False); the exact sum converts once here
        "cost_usd": None if delta.cost_usd is None else float(delta.cost_usd),
        "updated_at": utcnow(),
    }


def turn_rollup_values(day: dt.date, calls: Sequence[CallRecord], shard: int
                       ) -> list[dict[str, Any]]:
    """The values of each upsert one finished turn makes into `shard`, one per model, sorted
    by model: the upserts lock the user's rollup rows in that order, the same for every
    turn."""
    return [_rollup_values(period_start=day, model=model, shard=shard, delta=delta)
            for model, delta in sorted(deltas_by_model(calls).items())]


#: The user's usage of one UTC day, every model (parameters `owner`, `budget_day`): for a
#: key's daily budget, read by usage_of_day and inside a turn's opening. The cost comes back
#: as the driver gives it (a Decimal on PostgreSQL): a numeric result of the driver's SQL has
#: no type of SQLAlchemy's to convert it by.
SPENT_ON_DAY = (
    select(func.coalesce(func.sum(_USAGE.c.total_tokens), 0).label("tokens"),
           func.coalesce(func.sum(_USAGE.c.cost_usd), 0, type_=NullType()).label("cost"))
    .where(_USAGE.c.user_id == bindparam("owner", type_=_USAGE.c.user_id.type),
           _USAGE.c.period_type == PERIOD_DAY,
           _USAGE.c.period_start == bindparam("budget_day", type_=_USAGE.c.period_start.type))
)


async def usage_of_day(s: AsyncSession, user_id: str, day: dt.date) -> tuple[int, float]:
    """The user's tokens and known cost (USD) of one UTC day, every model, from the rollup."""
    tokens, cost = (await s.execute(SPENT_ON_DAY, {"owner": user_id, "budget_day": day})).one()
    return int(tokens or 0), float(cost or 0)
