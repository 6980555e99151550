"""app/store/limits.py on both backends: the window counter never loses a concurrent request,
the per-user lock serialises an insert-then-count across connections, streaming rows and a
day's usage are counted per user."""

from __future__ import annotations

import asyncio
import datetime as dt
from decimal import Decimal

from app.store import limits, usage
from app.store import messages as messages_store
from app.store.db import Database
from app.usage.figures import UsageFigures
from tests.store.factories import new_thread

MINUTE = dt.datetime(2026, 11, 24, 12, 0, tzinfo=dt.UTC)


async def hit(db: Database, user: str, window: dt.datetime) -> int:
    async with db.transaction() as s:
        return await limits.count_request(s, user, window)


async def test_concurrent_requests_each_get_their_own_count(db: Database) -> None:
    counts = await asyncio.gather(*(hit(db, "alice", MINUTE) for _ in range(12)))
    assert sorted(counts) == list(range(1, 13))
    assert await hit(db, "bob", MINUTE) == 1


async def test_a_new_window_starts_at_one_and_drops_the_old(db: Database) -> None:
    for _ in range(3):
        await hit(db, "alice", MINUTE)
    assert await hit(db, "alice", MINUTE + dt.timedelta(minutes=1)) == 1
    # the old window was deleted: a (late) request for it starts over rather than piling up
    assert await hit(db, "alice", MINUTE + dt.timedelta(minutes=2)) == 1


async def test_streaming_rows_and_the_days_usage_are_counted_per_user(db: Database) -> None:
    for user in ("alice", "alice", "bob"):
        thread = await new_thread(db, user)
        async with db.transaction() as s:
            await messages_store.append_user_message(s, thread, "hi")
            await messages_store.open_assistant_message(s, thread)
        async with db.transaction() as s:
            await usage.add_to_rollup(s, user_id=user, period_start=MINUTE.date(), model="m",
                                      delta=UsageFigures(total_tokens=10, cost_usd=Decimal("0.25")))
    async with db.transaction() as s:
        assert await limits.count_streaming(s, "alice") == 2
        assert await limits.count_streaming(s, "carol") == 0
        assert await limits.usage_of_day(s, "alice", MINUTE.date()) == (20, 0.5)
        assert await limits.usage_of_day(s, "alice", dt.date(2026, 11, 23)) == (0, 0.0)


async def test_the_user_lock_serialises_insert_then_count(db: Database) -> None:
    """Three openings of one user's turn, each inserting its rows and then counting under the
    user's lock: each counts its own row and the rows of the ones committed before it. On
    PostgreSQL, without the lock all three would count one; with a count whose snapshot
    predates the lock's wait, too."""
    threads = [await new_thread(db, "alice") for _ in range(3)]
    seen: list[int] = []

    async def open_one(index: int) -> None:
        async with db.transaction() as s:
            await messages_store.append_user_message(s, threads[index], "hi")
            await messages_store.open_assistant_message(s, threads[index])
            seen.append(await limits.lock_user_and_count_streaming(s, "alice"))
            await asyncio.sleep(0.05)  # widen the race window; no deadline depends on it

    await asyncio.gather(*(open_one(index) for index in range(3)))
    assert sorted(seen) == [1, 2, 3]
