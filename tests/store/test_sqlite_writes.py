"""SQLite's writes on the sqlite3 connection itself: the rows a session would give, SQLAlchemy's
errors, one transaction committed or rolled back whole, no trip to the connection's thread and
no other task in the middle, one connection for one write after another, and another
process's write lock waited for on the thread."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import (
    Column,
    Integer,
    MetaData,
    String,
    Table,
    bindparam,
    func,
    insert,
    select,
    text,
    update,
)
from sqlalchemy.exc import IntegrityError

from app.core.clock import utcnow
from app.store.db import Database
from app.store.driver_statements import DriverStatement
from app.store.types import UtcDateTime
from tests.support.loop_passes import LoopPasses, behind_another_process_writer

_T = Table("t", MetaData(), Column("id", Integer, primary_key=True),
           Column("name", String, unique=True), Column("at", UtcDateTime))
_INSERT = DriverStatement(insert(_T).values(name=bindparam("name"), at=bindparam("at")))
_RENAME = DriverStatement(update(_T).where(_T.c.name == bindparam("old"))
                          .values(name=bindparam("new")).returning(_T.c.id, _T.c.name))
_NAMES = DriverStatement(select(_T.c.name, _T.c.at).order_by(_T.c.id))
_COUNT = DriverStatement(select(_T.c.id).where(_T.c.name == bindparam("name")))
#: What this connection last inserted (0 for a connection that never did).
_LAST_INSERTED = DriverStatement(select(func.last_insert_rowid().label("id")))


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[Database]:
    database = Database(f"sqlite+aiosqlite:///{tmp_path}/writes.db")
    async with database.transaction() as s:
        await s.execute(text("CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT UNIQUE, "
                             "at DATETIME)"))
    yield database
    await database.dispose()


async def _names(db: Database) -> list[str]:
    async with db.transaction(read_only=True) as s:
        return list((await s.scalars(text("SELECT name FROM t ORDER BY id"))).all())


async def test_rows_counts_and_many_rows_as_a_session_would_give_them(db: Database) -> None:
    at = utcnow()
    async with db.sqlite_writes() as writes:
        writes.run_many(_INSERT, [{"name": "a", "at": at}, {"name": "b", "at": at}])
        renamed = writes.rows(_RENAME, {"old": "a", "new": "a!"})
        unchanged = writes.run(_RENAME, {"old": "missing", "new": "x"})
        rows = writes.rows(_NAMES, {})
        found = writes.scalar(_COUNT, {"name": "b"})
        none = writes.scalar(_COUNT, {"name": "missing"})
    assert renamed == [{"id": 1, "name": "a!"}]
    assert unchanged == 0 and (found, none) == (2, None)
    assert rows == [{"name": "a!", "at": at}, {"name": "b", "at": at}]  # aware UTC, as a session's
    async with db.transaction(read_only=True) as s:
        assert (await s.execute(select(_T.c.name, _T.c.at).order_by(_T.c.id))).all() == [
            ("a!", at), ("b", at)]


async def test_an_error_is_sqlalchemys_and_nothing_of_the_transaction_is_stored(
        db: Database) -> None:
    async with db.sqlite_writes() as writes:
        writes.run(_INSERT, {"name": "taken", "at": None})
    with pytest.raises(IntegrityError):
        async with db.sqlite_writes() as writes:
            writes.run(_INSERT, {"name": "kept back", "at": None})
            writes.run(_INSERT, {"name": "taken", "at": None})
    assert await _names(db) == ["taken"]
    async with db.sqlite_writes() as writes:  # the connection is usable again
        writes.run(_INSERT, {"name": "next", "at": None})
    assert await _names(db) == ["taken", "next"]


async def test_no_trip_to_the_thread_and_no_other_task_in_the_middle(
        db: Database, trips: list[str], passes: LoopPasses) -> None:
    async with db.sqlite_writes() as writes:  # the pool's connection, made before
        writes.run(_INSERT, {"name": "first", "at": None})
    trips.clear()
    before = passes.count
    async with db.sqlite_writes() as writes:
        writes.run(_INSERT, {"name": "a", "at": None})
        names = [row["name"] for row in writes.rows(_NAMES, {})]
    assert names == ["first", "a"]
    assert trips == [] and passes.count == before


async def test_a_write_runs_on_the_connection_the_last_one_used(db: Database) -> None:
    """With several idle connections in the pool, one write after another still runs on
    one connection: another connection's commit empties a connection's page cache, so
    writes handed round the pool read again every page the others had written."""
    async with (db.transaction(read_only=True) as a, db.transaction(read_only=True) as b,
                db.transaction(read_only=True) as c):  # three connections pooled
        for session in (a, b, c):
            await session.execute(text("SELECT 1"))
    async with db.sqlite_writes() as writes:
        writes.run(_INSERT, {"name": "first", "at": None})
    for name in ("second", "third"):
        async with db.sqlite_writes() as writes:
            last = writes.scalar(_LAST_INSERTED, {})
            writes.run(_INSERT, {"name": name, "at": None})
            assert last == writes.scalar(_LAST_INSERTED, {}) - 1


async def test_another_process_lock_is_waited_for_on_the_thread(
        db: Database, tmp_path: Path, trips: list[str], passes: LoopPasses) -> None:
    async def ours() -> None:
        async with db.sqlite_writes() as writes:
            writes.run(_INSERT, {"name": "ours", "at": None})

    await behind_another_process_writer(tmp_path / "writes.db", ours, trips, passes)
    assert await _names(db) == ["from the other process", "ours"]


async def test_only_sqlite_has_them() -> None:
    with pytest.raises(RuntimeError):
        async with Database("postgresql+asyncpg://nobody@127.0.0.1:9/none").sqlite_writes():
            pass
