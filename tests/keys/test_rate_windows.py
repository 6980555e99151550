"""The rate limit's counters: in the database (both backends) and in Redis, shared by every
instance that counts in the same place; a refused request counts nothing."""

from __future__ import annotations

import datetime as dt

import pytest

from app.keys.rate_windows import DatabaseRateWindows, RateWindows, RedisRateWindows
from app.store.db import Database
from tests.support.gateway import free_port
from tests.support.redis_keys import REDIS_URL

MINUTE = dt.datetime(2026, 11, 24, 12, 0, tzinfo=dt.UTC)
NEXT = MINUTE + dt.timedelta(minutes=1)


async def takes(windows: RateWindows, user: str, start: dt.datetime, n: int) -> list[bool]:
    return [await windows.take(user, start, 2) for _ in range(n)]


async def test_the_database_admits_up_to_the_limit_per_window(db: Database) -> None:
    one, other = DatabaseRateWindows(db), DatabaseRateWindows(db)  # two processes
    assert await takes(one, "alice", MINUTE, 1) + await takes(other, "alice", MINUTE, 3) == [
        True, True, False, False]
    assert await takes(one, "bob", MINUTE, 1) == [True]
    assert await takes(other, "alice", NEXT, 3) == [True, True, False]


async def test_redis_is_shared_and_a_refusal_counts_nothing(redis_prefix: str) -> None:
    one = RedisRateWindows(REDIS_URL, prefix=redis_prefix)
    other = RedisRateWindows(REDIS_URL, prefix=redis_prefix)
    try:
        assert await takes(one, "alice", MINUTE, 1) + await takes(other, "alice", MINUTE, 3) == [
            True, True, False, False]
        assert int(await one.client.get(one.key("alice", MINUTE)) or 0) == 2
        assert await one.client.ttl(one.key("alice", MINUTE)) > 0
        assert await takes(one, "bob", MINUTE, 1) == [True]
        assert await takes(other, "alice", NEXT, 3) == [True, True, False]
    finally:
        await one.aclose()
        await other.aclose()


async def test_redis_out_of_reach_lets_requests_through(
    capsys: pytest.CaptureFixture[str],
) -> None:
    windows = RedisRateWindows(f"redis://127.0.0.1:{free_port()}/0")
    try:
        assert await takes(windows, "alice", MINUTE, 3) == [True, True, True]
    finally:
        await windows.aclose()
    assert "rate_limit_unavailable" in capsys.readouterr().out
