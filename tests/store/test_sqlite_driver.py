"""SQLite statements make one trip each to the connection's thread, and still behave as the
sqlite3 module's: rows, counts, many rows at once, errors, transactions."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from app.store.db import Database
from app.store.sqlite_driver import OneTripConnection


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[Database]:
    database = Database(f"sqlite+aiosqlite:///{tmp_path}/driver.db")
    async with database.transaction() as s:
        await s.execute(text("CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT UNIQUE)"))
    yield database
    await database.dispose()


@pytest.fixture
def trips(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The name of each function sent to a connection's thread."""
    sent: list[str] = []
    original = OneTripConnection._execute

    async def counted(self: OneTripConnection, fn: Any, *args: Any, **kwargs: Any) -> Any:
        sent.append(getattr(fn, "__name__", repr(fn)))
        return await original(self, fn, *args, **kwargs)

    monkeypatch.setattr(OneTripConnection, "_execute", counted)
    return sent


async def test_a_statement_is_one_trip_and_a_transaction_adds_its_begin_and_commit(
    db: Database, trips: list[str]
) -> None:
    async with db.transaction() as s:
        await s.execute(text("INSERT INTO t (name) VALUES ('a'), ('b')"))
        rows = (await s.execute(text("SELECT name FROM t ORDER BY id"))).all()
        changed = await s.execute(text("UPDATE t SET name = name || '!' WHERE name = 'a'"))
    assert [r.name for r in rows] == ["a", "b"]
    assert changed.rowcount == 1  # type: ignore[attr-defined]
    # BEGIN IMMEDIATE, the three statements, the commit; aiosqlite's own cursors take three
    # or four trips a statement.
    assert trips == ["_run"] * 4 + ["commit"]


async def test_many_rows_at_once_and_the_last_rowid(db: Database) -> None:
    async with db.transaction() as s:
        await s.execute(text("INSERT INTO t (name) VALUES (:name)"),
                        [{"name": f"n{i}"} for i in range(50)])
        inserted = await s.execute(text("INSERT INTO t (name) VALUES ('last')"))
        count = await s.scalar(text("SELECT count(*) FROM t"))
    assert count == 51
    assert inserted.lastrowid == 51  # type: ignore[attr-defined]


async def test_a_failed_statement_raises_the_usual_error_and_rolls_back(db: Database) -> None:
    async with db.transaction() as s:
        await s.execute(text("INSERT INTO t (name) VALUES ('taken')"))
    with pytest.raises(IntegrityError):
        async with db.transaction() as s:
            await s.execute(text("INSERT INTO t (name) VALUES ('kept back')"))
            await s.execute(text("INSERT INTO t (name) VALUES ('taken')"))
    async with db.transaction() as s:
        names = (await s.scalars(text("SELECT name FROM t"))).all()
    assert names == ["taken"]
