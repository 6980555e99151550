"""The SQL of the refusal rollup (`refusal_counts`, per UTC day and reason): queries only.

Counts are added with one INSERT ... ON CONFLICT DO UPDATE SET n = n + excluded.n per key, so
several processes flushing at once never lose a refusal."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping

from sqlalchemy import Table, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from app.core.clock import utcnow
from app.store.models import RefusalCount, table_of
from app.store.per_database import Upsert, upserts

#: A refusal rollup key: (UTC day, reason).
RefusalKey = tuple[dt.date, str]


async def add_refusals(s: AsyncSession, counts: Mapping[RefusalKey, int]) -> None:
    """Add `counts` to the (day, reason) rows, creating missing ones; keys in sorted order
    so concurrent flushes lock rows in the same order."""
    if not counts:
        return
    now = utcnow()
    rows = [{"day": day, "reason": reason, "refusal_count": n, "updated_at": now}
            for (day, reason), n in sorted(counts.items())]
    await s.execute(_ADD.of(s), rows)


def _adding(insert: Callable[[Table], Upsert]) -> Upsert:
    """The refusal upsert: its count added to the (day, reason) row's."""
    table = table_of(RefusalCount)
    row = insert(table)
    return row.on_conflict_do_update(
        index_elements=["day", "reason"],
        set_={"refusal_count": table.c.refusal_count + row.excluded.refusal_count,
              "updated_at": row.excluded.updated_at})


_ADD = upserts(_adding)


async def refusals_between(
    s: AsyncSession, first_day: dt.date, last_day: dt.date
) -> dict[RefusalKey, int]:
    """The refusal counts of the UTC days [first_day, last_day], in (day, reason) order."""
    result = await s.execute(
        select(RefusalCount.day, RefusalCount.reason, func.sum(RefusalCount.refusal_count))
        .where(RefusalCount.day >= first_day, RefusalCount.day <= last_day)
        .group_by(RefusalCount.day, RefusalCount.reason)
        .order_by(RefusalCount.day, RefusalCount.reason))
    return {(day, reason): int(n) for day, reason, n in result.all()}
