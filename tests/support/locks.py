"""Waiting, in a test, until PostgreSQL shows a session blocked on a lock: the moment a race
the test sets up has begun."""

from __future__ import annotations

import asyncio

from sqlalchemy import text

from app.store.db import Database


async def until_a_lock_is_awaited(db: Database) -> None:
    """Until some session of the database waits for a lock (bounded: 500 looks)."""
    for _ in range(500):
        async with db.transaction(read_only=True) as s:
            if await s.scalar(text("SELECT count(*) FROM pg_locks WHERE NOT granted")):
                return
        await asyncio.sleep(0.01)
    raise AssertionError("no session waited for a lock")
