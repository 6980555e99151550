"""The daily usage rollup: sums, models, unknown cost, and concurrent writers."""

from __future__ import annotations

import asyncio
import datetime as dt
import math
from dataclasses import dataclass

import pytest
from sqlalchemy import select

from app.answer.records import FinishedMessage
from app.store.db import Database
from app.store.models import LlmCall, UserTokenUsage
from app.threads import repository as threads_store
from app.turn.rows import postgres as postgres_rows
from app.turn.rows import sqlite as sqlite_rows
from app.turn.rows import turn_rows
from app.usage import repository as usage_store
from tests.store.factories import call, new_thread, open_rows, turn


@dataclass
class ModelUsage:
    """One user's rollup rows of one model, summed over days (a test may cross midnight)."""

    days: set[dt.date]
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    message_count: int = 0
    llm_call_count: int = 0
    cost_usd: float | None = None  # the known part; None while every call was unpriced
    unpriced_call_count: int = 0

    def add(self, row: UserTokenUsage) -> None:
        self.days.add(row.period_start)
        self.prompt_tokens += row.prompt_tokens
        self.completion_tokens += row.completion_tokens
        self.total_tokens += row.total_tokens
        self.message_count += row.message_count
        self.llm_call_count += row.llm_call_count
        if row.cost_usd is not None:
            self.cost_usd = (self.cost_usd or 0.0) + row.cost_usd
        self.unpriced_call_count += row.unpriced_call_count


async def _usage(db: Database, user_id: str = "alice") -> dict[str, ModelUsage]:
    async with db.transaction() as s:
        rows = await s.execute(select(UserTokenUsage).where(UserTokenUsage.user_id == user_id))
        usage: dict[str, ModelUsage] = {}
        for row in rows.scalars():
            assert row.period_type == usage_store.PERIOD_DAY
            usage.setdefault(row.model, ModelUsage(set())).add(row)
        return usage


async def test_rollup_sums_turns_per_model(db: Database) -> None:
    thread = await new_thread(db)
    await turn(db, thread, "q1", "a1", calls=[call("gpt-4o", 100, 20, cost=0.5)])
    await turn(db, thread, "q2", "a2", calls=[call("gpt-4o", 200, 30, cost=0.25),
                                            call("mini", 10, 2, stage="title", cost=0.125)])
    await turn(db, thread, "q3", "a3", calls=[call("mini", 7, 3, cost=None)])
    other = await new_thread(db, "bob")
    await turn(db, other, "q", "a", calls=[call("gpt-4o", 1, 1)])
    usage = await _usage(db)
    big, mini = usage["gpt-4o"], usage["mini"]
    assert (big.prompt_tokens, big.completion_tokens, big.total_tokens) == (300, 50, 350)
    assert (big.message_count, big.llm_call_count, big.unpriced_call_count) == (2, 2, 0)
    assert big.cost_usd == pytest.approx(0.75)
    # mini: a title call (priced) and a main call (unpriced): cost is the known part,
    # and the row says one call is missing from it.
    assert (mini.total_tokens, mini.message_count, mini.llm_call_count) == (22, 1, 2)
    assert mini.cost_usd == pytest.approx(0.125) and mini.unpriced_call_count == 1
    assert (await _usage(db, "bob"))["gpt-4o"].total_tokens == 2


async def test_unknown_cost_stays_null_until_a_price_is_known(db: Database) -> None:
    thread = await new_thread(db)
    await turn(db, thread, "q", "a", calls=[call("local-model", cost=None)])
    assert (await _usage(db))["local-model"].cost_usd is None
    await turn(db, thread, "q", "a", calls=[call("local-model", cost=0.0)])
    row = (await _usage(db))["local-model"]
    assert row.cost_usd == 0.0 and row.unpriced_call_count == 1


async def test_turn_without_calls_adds_no_rollup(db: Database) -> None:
    thread = await new_thread(db)
    await turn(db, thread, "q", "", calls=[], status="failed", metadata={})
    assert await _usage(db) == {}


@pytest.mark.parametrize("days", [1, 2], ids=["one-day", "across-midnight"])
@pytest.mark.parametrize("writers", [50])
async def test_concurrent_finishes_leave_exact_sums(
    database_url: str, backend: str, writers: int, days: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each finish in its own session and connection, all at once, for one user; with
    days=2 the finishes alternate between two UTC days, as if they crossed midnight."""
    if days == 2:
        # Each finish's moment gets the next of the two days, however often it is asked
        # for (PostgreSQL's finish asks twice: for its statement's shape and its values).
        today, seen = dt.datetime.now(dt.UTC).date(), dict[dt.datetime, dt.date]()

        def alternating_day(moment: dt.datetime) -> dt.date:
            return seen.setdefault(moment, today + dt.timedelta(days=len(seen) % 2))

        for module in (postgres_rows, sqlite_rows):
            monkeypatch.setattr(module, "utc_day", alternating_day)
    db = Database(database_url, pool_size=writers, max_overflow=0)
    try:
        async with db.transaction() as s:
            threads = [await threads_store.create_thread(s, "alice", f"t{n}")
                       for n in range(writers)]
        opened = [(await open_rows(db, thread, "q")).assistant for thread in threads]

        async def finish(n: int) -> None:
            calls = [call("gpt-4o", 1000 + n, 100 + n, cost=0.0123),
                     call("gpt-4o-mini", 10, n, stage="title", cost=None)]
            await turn_rows(db).finish(
                FinishedMessage(opened[n].id, f"a{n}", {"tokens": 1}, "complete", calls))

        await asyncio.gather(*(finish(n) for n in range(writers)))
        usage = await _usage(db)
        async with db.transaction() as s:
            raw = (await s.execute(select(LlmCall))).scalars().all()
    finally:
        await db.dispose()
    big, mini = usage["gpt-4o"], usage["gpt-4o-mini"]
    assert len(big.days) >= days and len(mini.days) >= days  # one day may really be two
    span = range(writers)
    assert big.prompt_tokens == sum(1000 + n for n in span)
    assert big.completion_tokens == sum(100 + n for n in span)
    assert big.total_tokens == sum(1100 + 2 * n for n in span)
    assert (big.message_count, big.llm_call_count) == (writers, writers)
    assert math.isclose(big.cost_usd or 0.0, 0.0123 * writers, abs_tol=1e-9)
    assert mini.total_tokens == sum(10 + n for n in span) and mini.message_count == 0
    assert mini.cost_usd is None and mini.unpriced_call_count == writers
    assert len(raw) == 2 * writers
    assert sum(c.total_tokens for c in raw) == big.total_tokens + mini.total_tokens
