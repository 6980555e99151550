"""Row locks in a test: a statement's locks held by another connection's open transaction,
and waiting until PostgreSQL shows a session blocked on a lock (the moment a race the test
sets up has begun)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
from sqlalchemy import text
from sqlalchemy.engine import make_url

from app.store.db import Database


@asynccontextmanager
async def held(database_url: str, statement: str, *args: Any) -> AsyncIterator[None]:
    """`statement` run in a transaction of another connection, left open until the block
    ends: what the server keeps of a process whose COMMIT a partition holds."""
    dsn = make_url(database_url).set(drivername="postgresql").render_as_string(
        hide_password=False)
    connection = await asyncpg.connect(dsn)
    try:
        transaction = connection.transaction()
        await transaction.start()
        await connection.execute(statement, *args)
        yield
        await transaction.rollback()
    finally:
        await connection.close()


async def a_lock_is_awaited(db: Database) -> bool:
    """Whether some session of the database waits for a lock now."""
    async with db.transaction(read_only=True) as s:
        return bool(await s.scalar(text("SELECT count(*) FROM pg_locks WHERE NOT granted")))


async def until_a_lock_is_awaited(db: Database) -> None:
    """Until some session of the database waits for a lock (bounded: 500 looks)."""
    for _ in range(500):
        if await a_lock_is_awaited(db):
            return
        await asyncio.sleep(0.01)
    raise AssertionError("no session waited for a lock")
