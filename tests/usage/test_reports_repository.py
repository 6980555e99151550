"""app.usage.reports_repository, the usage queries, on both backends: the daily rollup rows, the raw
llm_calls rows they add up to, rewriting one day under the rollup lock, the days there are, and
messages without token data."""

from __future__ import annotations

import asyncio
import datetime as dt
from decimal import Decimal

import pytest

from app.store.db import Database
from app.usage import reports_repository as usage_reports
from app.usage.figures import UsageFigures
from tests.store.factories import bill, spent
from tests.support.locks import until_a_lock_is_awaited
from tests.usage_accounting.workload import (
    DAY1,
    DAY2,
    DAY3,
    at,
    call,
    finished_turn,
    mixed_workload,
    new_thread,
    rollup_rows,
    verify,
)


async def test_messages_without_token_data_are_counted_not_zeroed(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    thread = await new_thread(db, "carol")
    # an old-style row: no tokens in metadata, no llm_calls
    await finished_turn(db, monkeypatch, thread, at(DAY1, 8), [], metadata={"model": "old"})
    # a float or a string is not token data either
    await finished_turn(db, monkeypatch, thread, at(DAY1, 9), [], metadata={"tokens": "12"})
    await finished_turn(db, monkeypatch, thread, at(DAY2, 9), [], metadata={"tokens": 1.5})
    await finished_turn(db, monkeypatch, thread, at(DAY2, 10), [call("gpt-4o", 10, 2)])
    async with db.transaction() as s:
        assert await usage_reports.messages_without_token_data(s) == 3
        assert await usage_reports.messages_without_token_data(s, DAY1, DAY1) == 2
        assert await usage_reports.messages_without_token_data(s, DAY2, DAY2) == 1
        assert await usage_reports.messages_without_token_data(s, DAY3, DAY3) == 0
    assert await verify(db, DAY2) == []


async def test_stored_rollups_read_the_rows_as_they_are(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    await mixed_workload(db, monkeypatch)
    rows = await rollup_rows(db)
    async with db.transaction() as s:
        everything = await usage_reports.stored_rollups(s, DAY1, DAY3)
        bobs = await usage_reports.stored_rollups(s, DAY1, DAY3, user_id="bob")
        day2 = await usage_reports.stored_rollups(s, DAY2, DAY2)
    assert everything.keys() == rows.keys()
    assert list(bobs) == [("bob", DAY1, "gpt-4o"), ("bob", DAY3, "gpt-4o")]
    assert {key[1] for key in day2} == {DAY2}
    mini = everything[("alice", DAY1, "gpt-4o-mini")]
    assert (mini.total_tokens, mini.message_count, mini.llm_call_count) == (25, 0, 1)
    assert mini.cost_usd == Decimal("0.000006000")  # exact, at the column's scale
    assert everything[("alice", DAY2, "local-llama")].cost_usd is None


async def test_finished_calls_are_the_rows_of_the_days_with_their_finish(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    await mixed_workload(db, monkeypatch)
    async with db.transaction() as s:
        day1 = await usage_reports.finished_calls(s, DAY1, DAY1)
        all_days = await usage_reports.finished_calls(s, DAY1, DAY3)
    # day 1, in finish order: alice 09:00 (title + main), 10:00, bob 15:00, alice 23:59:59
    finishes = [(c.written_at, c.user_id) for c in day1]
    assert finishes == sorted(finishes)
    assert [(user, moment.astimezone(dt.UTC).hour) for moment, user in finishes] == [
        ("alice", 9), ("alice", 9), ("alice", 10), ("bob", 15), ("alice", 23)]
    assert {c.call.stage for c in day1[:2]} == {"title", "main"}  # one finish, one moment
    assert day1[-1].call.usage_source == "partial" and day1[-1].call.status == "interrupted"
    assert len(all_days) == 12
    assert {c.written_at.astimezone(dt.UTC).date() for c in all_days} == {DAY1, DAY2, DAY3}


async def test_replace_rollup_day_rewrites_that_day_only(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    await mixed_workload(db, monkeypatch)
    before = await rollup_rows(db)
    figures = UsageFigures(total_tokens=12, prompt_tokens=10, completion_tokens=2,
                           message_count=1, llm_call_count=1,
                           cost_usd=Decimal("0.000123456"))
    async with db.transaction() as s:
        await usage_reports.lock_rollups(s)
        await usage_reports.replace_rollup_day(s, DAY2, {("zoe", DAY2, "m"): figures})
    after = await rollup_rows(db)
    assert {k: v for k, v in after.items() if k[1] != DAY2} == \
        {k: v for k, v in before.items() if k[1] != DAY2}
    assert [k for k in after if k[1] == DAY2] == [("zoe", DAY2, "m")]
    async with db.transaction() as s:
        stored = await usage_reports.stored_rollups(s, DAY2, DAY2)
    assert stored == {("zoe", DAY2, "m"): figures}


async def test_usage_days_come_from_calls_and_rollups(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with db.transaction() as s:
        assert await usage_reports.usage_days(s) == []
    thread = await new_thread(db, "dora")
    await finished_turn(db, monkeypatch, thread, at(DAY1), [call("gpt-4o", 1, 1)])
    await finished_turn(db, monkeypatch, thread, at(DAY3), [call("gpt-4o", 1, 1)])
    lone_day = DAY3 + dt.timedelta(days=5)
    async with db.transaction() as s:  # a rollup day without calls, as a backfill may leave
        await usage_reports.lock_rollups(s)
        await usage_reports.replace_rollup_day(
            s, lone_day, {("dora", lone_day, "m"): UsageFigures(total_tokens=1)})
        # every day between the first and the last call, and the rollup's own days
        assert await usage_reports.usage_days(s) == [DAY1, DAY2, DAY3, lone_day]


async def test_a_finish_waits_while_a_day_is_rewritten(database_url: str) -> None:
    """lock_rollups holds writers of the rollup off until the rewriting transaction ends
    (PostgreSQL: the table lock; SQLite: BEGIN IMMEDIATE), so no increment falls in between."""
    db = Database(database_url, pool_size=3, max_overflow=0)
    day = dt.date(2026, 11, 20)
    one = UsageFigures(total_tokens=1, llm_call_count=1, unpriced_call_count=1)
    try:
        locked, release = asyncio.Event(), asyncio.Event()

        async def rewrite() -> None:
            async with db.transaction() as s:
                await usage_reports.lock_rollups(s)
                await usage_reports.replace_rollup_day(s, day, {("u", day, "m"): one})
                locked.set()
                await release.wait()

        async def finish() -> None:
            await bill(db, "u", spent("m", 1, None),
                       at=dt.datetime.combine(day, dt.time(12), dt.UTC))

        rewriting = asyncio.create_task(rewrite())
        await locked.wait()
        finishing = asyncio.create_task(finish())
        if db.backend == "postgresql":
            await until_a_lock_is_awaited(db)  # the finish waits for the table lock
        else:  # for the process's SQLite writer lock, reached with no I/O: a few loop passes
            for _ in range(10):
                await asyncio.sleep(0)
        assert not finishing.done()
        release.set()
        await asyncio.gather(rewriting, finishing)
        async with db.transaction() as s:
            rows = await usage_reports.stored_rollups(s, day, day)
        assert rows[("u", day, "m")].total_tokens == 2  # the finish landed on the new row
    finally:
        await db.dispose()
