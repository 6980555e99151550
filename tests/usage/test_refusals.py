"""Refusals per UTC day and reason (app.usage.refusals, refusal_counts) on SQLite and
PostgreSQL: counted in memory, added to the table by each flush, kept when a flush fails."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from app.store.db import Database
from app.store.errors import DatabaseUnavailable
from app.usage import admin_reports
from app.usage.refusals import RefusalTally

NOON = dt.datetime(2026, 11, 21, 12, tzinfo=dt.UTC)
DAY = NOON.date()


async def _totals(db: Database) -> dict[str, int]:
    answer = await admin_reports.refusal_report(db, DAY, DAY)
    totals: dict[str, int] = answer["totals"]
    return totals


async def test_flushes_of_several_processes_add_up(db: Database) -> None:
    first, second = (RefusalTally(db, clock=lambda: NOON) for _ in range(2))
    for _ in range(3):
        first.count("rate_limited")
    second.count("rate_limited")
    second.count("gateway_busy")
    await first.flush()
    await second.flush()
    first.count("rate_limited")
    await first.flush()
    assert await _totals(db) == {"gateway_busy": 1, "rate_limited": 5}
    assert first.pending == second.pending == 0
    await first.flush()  # nothing counted since: nothing written
    assert await _totals(db) == {"gateway_busy": 1, "rate_limited": 5}


async def test_a_refusal_counts_on_its_own_utc_day(db: Database) -> None:
    late = dt.datetime(2026, 11, 21, 23, 30, tzinfo=dt.timezone(dt.timedelta(hours=-5)))
    tally = RefusalTally(db, clock=lambda: late)  # 04:30 UTC on the 22nd
    tally.count("budget_exceeded")
    await tally.flush()
    next_day = await admin_reports.refusal_report(db, DAY + dt.timedelta(days=1),
                                                  DAY + dt.timedelta(days=1))
    assert next_day["totals"] == {"budget_exceeded": 1}
    assert await _totals(db) == {}


async def test_a_failed_flush_keeps_its_counts_for_the_next(
    db: Database, tmp_path: Path
) -> None:
    unreachable = Database(f"sqlite+aiosqlite:///{tmp_path}/missing/dir/x.db")
    tally = RefusalTally(unreachable, clock=lambda: NOON)
    tally.count("too_many_streams")
    tally.count("too_many_streams")
    try:
        with pytest.raises(DatabaseUnavailable):
            await tally.flush()
    finally:
        await unreachable.dispose()
    assert tally.pending == 2
    tally.count("too_many_streams")
    tally.db = db  # the database is back
    await tally.flush()
    assert tally.pending == 0
    assert await _totals(db) == {"too_many_streams": 3}
