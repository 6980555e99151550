"""app/keys/limits_repository.py on both backends: the window counter never loses a concurrent
request nor lets two pass its limit together, the per-user lock serialises an insert-then-count
across connections, streaming rows and a day's usage are counted per user."""

from __future__ import annotations

import asyncio
import datetime as dt

from sqlalchemy import select

from app.keys import limits_repository as limits
from app.store.db import Database
from app.store.models import RateLimitWindow
from app.turn.rows import Opened, OpeningRequest, turn_rows
from app.usage import repository as usage
from tests.store.factories import bill, new_thread, open_rows, spent
from tests.support.databases import postgres_only
from tests.support.statements import statements_in_transaction

MINUTE = dt.datetime(2026, 11, 24, 12, 0, tzinfo=dt.UTC)


async def hit(db: Database, user: str, window: dt.datetime, limit: int = 100) -> bool:
    async with db.one_statement() as s:
        return await limits.take_request(s, user, window, limit)


async def test_concurrent_requests_neither_lose_a_count_nor_pass_the_limit_together(
    db: Database
) -> None:
    taken = await asyncio.gather(*(hit(db, "alice", MINUTE, limit=8) for _ in range(12)))
    assert sorted(taken) == [False] * 4 + [True] * 8
    assert not await hit(db, "alice", MINUTE, limit=8)  # refused ones counted nothing:
    assert await hit(db, "alice", MINUTE, limit=9)  # one more fits under 9, and only one
    assert not await hit(db, "alice", MINUTE, limit=9)
    assert await hit(db, "bob", MINUTE, limit=1)


async def _windows(db: Database) -> list[dt.datetime]:
    async with db.transaction(read_only=True) as s:
        return list((await s.execute(select(RateLimitWindow.window_start))).scalars().all())


async def test_a_new_window_starts_empty_and_drops_the_old(db: Database) -> None:
    for _ in range(3):
        assert await hit(db, "alice", MINUTE, limit=3)
    later = MINUTE + dt.timedelta(minutes=1)
    assert await hit(db, "alice", later, limit=1)
    assert await _windows(db) == [later]  # the table holds at most a row per user
    # a (late) request for the old window starts it over rather than piling up
    assert await hit(db, "alice", MINUTE, limit=1)


async def test_streaming_rows_and_the_days_usage_are_counted_per_user(db: Database) -> None:
    for user in ("alice", "alice", "bob"):
        thread = await new_thread(db, user)
        await open_rows(db, thread, "hi")
        await bill(db, user, spent("m", 10, 0.25), at=MINUTE)
    async with db.transaction() as s:
        assert await limits.count_streaming(s, "alice") == 2
        assert await limits.count_streaming(s, "carol") == 0
        assert await usage.usage_of_day(s, "alice", MINUTE.date()) == (20, 0.5)
        assert await usage.usage_of_day(s, "alice", dt.date(2026, 11, 23)) == (0, 0.0)


async def test_the_user_lock_serialises_insert_then_count(db: Database) -> None:
    """Three openings of one user's turn, each inserting its rows and then counting under the
    user's lock: each counts its own row and the rows of the ones committed before it. On
    PostgreSQL, without the lock all three would count one; with a count whose snapshot
    predates the lock's wait, too."""
    threads = [await new_thread(db, "alice") for _ in range(3)]
    seen: list[int] = []

    async def open_one(index: int) -> None:
        async with db.transaction() as s:
            opened = await turn_rows(db).open_in(s, OpeningRequest("alice", threads[index].id,
                                                                   "hi"))
            assert isinstance(opened, Opened), opened
            seen.append(await limits.lock_user_and_count_streaming(s, "alice"))
            await asyncio.sleep(0.05)  # widen the race window; no deadline depends on it

    await asyncio.gather(*(open_one(index) for index in range(3)))
    assert sorted(seen) == [1, 2, 3]


@postgres_only("transaction blocks and round trips are PostgreSQL's")
async def test_a_request_is_counted_by_one_statement_without_a_transaction(
    db: Database
) -> None:
    """PostgreSQL: the older windows' DELETE and the upsert are one statement, which needs
    no BEGIN and no COMMIT: a round trip per turn request instead of four."""
    assert await hit(db, "alice", MINUTE)
    with statements_in_transaction(db) as statements:
        assert await hit(db, "alice", MINUTE + dt.timedelta(minutes=1))
    assert statements == [("WITH", False)]
