"""Which errors mean the database is unavailable (503), and which are bugs (500)."""

from __future__ import annotations

import sqlite3

import asyncpg
import pytest
from sqlalchemy import exc as sa_exc
from sqlalchemy import text

from app.store.db import Database
from app.store.errors import DatabaseBusy, DatabaseUnavailable
from app.store.unavailable import is_unavailable


def _wrapped(cls: type[sa_exc.DBAPIError], orig: Exception, invalidated: bool = False
             ) -> sa_exc.DBAPIError:
    return cls("SELECT 1", {}, orig, connection_invalidated=invalidated)


@pytest.mark.parametrize("error", [
    ConnectionRefusedError(111, "refused"),
    TimeoutError(),
    asyncpg.CannotConnectNowError("starting up"),
    asyncpg.ConnectionDoesNotExistError("closed in the middle"),
    asyncpg.ObjectNotInPrerequisiteStateError(
        'database "x" is not currently accepting connections'),
    _wrapped(sa_exc.OperationalError, sqlite3.OperationalError("database is locked")),
    _wrapped(sa_exc.InterfaceError, Exception("connection is closed")),
    _wrapped(sa_exc.DBAPIError, Exception("reset"), invalidated=True),
    sa_exc.TimeoutError("QueuePool limit reached"),
])
def test_connection_errors_are_unavailable(error: Exception) -> None:
    assert is_unavailable(error)


@pytest.mark.parametrize("error", [
    _wrapped(sa_exc.IntegrityError, Exception("duplicate key")),
    _wrapped(sa_exc.ProgrammingError, Exception("syntax error")),
    ValueError("bug"),
    asyncpg.ObjectNotInPrerequisiteStateError("cannot refresh materialized view"),
])
def test_bugs_are_not(error: Exception) -> None:
    assert not is_unavailable(error)


async def test_a_locked_sqlite_database_raises_database_unavailable(tmp_path: object) -> None:
    path = f"{tmp_path}/locked.db"
    db = Database(f"sqlite+aiosqlite:///{path}", sqlite_busy_timeout_s=0.1)
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        holder.execute("BEGIN EXCLUSIVE")
        with pytest.raises(DatabaseUnavailable) as caught:
            async with db.transaction() as session:
                await session.execute(text("SELECT 1"))
        assert isinstance(caught.value.__cause__, sa_exc.OperationalError)
        holder.execute("ROLLBACK")
        async with db.transaction() as session:  # recovery needs nothing but the next try
            assert (await session.execute(text("SELECT 1"))).scalar() == 1
    finally:
        holder.close()
        await db.dispose()


@pytest.mark.parametrize("read_only", [False, True], ids=["transaction", "read"])
async def test_no_free_pooled_connection_in_time_raises_database_busy(
        database_url: str, read_only: bool) -> None:
    """The pool's checkout timeout is an overload of this process, told apart from an outage
    (still a DatabaseUnavailable for every caller that does not care), for a read too."""
    db = Database(database_url, pool_size=1, max_overflow=0, pool_timeout=0.05)
    try:
        async with db.engine.connect():  # the only connection, held
            with pytest.raises(DatabaseBusy) as caught:
                async with db.transaction(read_only=read_only) as session:
                    await session.execute(text("SELECT 1"))
        assert isinstance(caught.value, DatabaseUnavailable)
        async with db.transaction() as session:  # given back: the next one gets it
            assert (await session.execute(text("SELECT 1"))).scalar() == 1
    finally:
        await db.dispose()
