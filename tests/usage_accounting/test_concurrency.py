"""Backfill while messages are being finished: no increment lost or counted twice
(PostgreSQL: the rollup table lock; SQLite: BEGIN IMMEDIATE)."""

from __future__ import annotations

import asyncio
import datetime as dt

from app.answer.records import FinishedMessage
from app.store.db import Database
from app.threads import repository as threads_store
from app.turn.rows import turn_rows
from app.usage import reports as usage_reports
from app.usage import rollups as usage_rollups
from tests.store.factories import open_rows
from tests.usage_accounting.workload import call

WRITERS = 30


async def test_backfill_racing_finishes_leaves_exact_sums(database_url: str) -> None:
    db = Database(database_url, pool_size=WRITERS + 4, max_overflow=0)
    try:
        async with db.transaction() as s:
            threads = [await threads_store.create_thread(s, "racer", f"t{n}")
                       for n in range(WRITERS)]
        opened = [(await open_rows(db, thread, "q")).assistant for thread in threads]
        first_day = dt.datetime.now(dt.UTC).date()

        async def finish(n: int) -> None:
            calls = [call("gpt-4o", 100 + n, n, cost=0.001),
                     call("gpt-4o-mini", 7, 3, stage="title", cost=None)]
            await turn_rows(db).finish(
                FinishedMessage(opened[n].id, "a", {"tokens": 1}, "complete", calls))

        async def backfill() -> None:
            for _ in range(5):
                await usage_rollups.backfill_day(db, dt.datetime.now(dt.UTC).date())
                await asyncio.sleep(0)

        await asyncio.gather(*(finish(n) for n in range(WRITERS)), backfill())
        last_day = dt.datetime.now(dt.UTC).date()
        assert await usage_rollups.verify_day(db, first_day) == []
        assert await usage_rollups.verify_day(db, last_day) == []
        report = await usage_reports.usage_report(db, "racer", first_day, last_day, "model")
        main = report.rows["gpt-4o"]
        assert main.total_tokens == sum(100 + 2 * n for n in range(WRITERS))
        assert (main.message_count, main.llm_call_count) == (WRITERS, WRITERS)
        assert report.rows["gpt-4o-mini"].unpriced_call_count == WRITERS
    finally:
        await db.dispose()
