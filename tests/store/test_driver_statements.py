"""DriverStatement: a statement's rows as SQLAlchemy's own execution gives them, from SQL
compiled once per dialect; the database's errors as SQLAlchemy's; what it will not run."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

import pytest
from sqlalchemy import Select, bindparam, literal, literal_column, select, table
from sqlalchemy.exc import DBAPIError

from app.store.db import Database
from app.store.driver_statements import DriverStatement
from app.store.models import Thread, table_of
from app.threads.repository import set_autonomy
from tests.store.factories import new_thread
from tests.support.statements import driver_compiles

_THREADS = table_of(Thread)


def _the_thread() -> Select[Any]:
    t = _THREADS.c
    return (select(t.id, t.title, t.autonomy, t.created_at, literal(7).label("seven"))
            .where(t.id == bindparam("wanted", type_=t.id.type),
                   t.user_id == bindparam("owner", type_=t.user_id.type)))


async def test_rows_are_what_sqlalchemy_gives(db: Database) -> None:
    """The same values of the same types: an aware UTC time, a JSON document, a UUID."""
    thread = await new_thread(db, title="kept")
    async with db.transaction() as s:
        await set_autonomy(s, "alice", thread.id, {"followups": True})
    statement = _the_thread()
    params = {"wanted": thread.id, "owner": "alice"}
    async with db.transaction(read_only=True) as s:
        expected = [dict(row._mapping) for row in await s.execute(statement, params)]
        rows = await DriverStatement(statement).rows(s, params)
    assert rows == expected
    assert [type(value) for value in rows[0].values()] == [
        type(value) for value in expected[0].values()]
    assert rows[0]["created_at"].utcoffset() == dt.timedelta(0)
    assert rows[0]["autonomy"] == {"followups": True} and rows[0]["title"] == "kept"


async def test_a_statement_is_compiled_once_per_dialect(
        db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    compiled = driver_compiles(monkeypatch)
    statement = DriverStatement(_the_thread())
    threads = [await new_thread(db) for _ in range(3)]
    async with db.one_statement() as runner:
        found = [await statement.rows(runner, {"wanted": thread.id, "owner": "alice"})
                 for thread in threads]
    assert [rows[0]["id"] for rows in found] == [thread.id for thread in threads]
    assert len(compiled) == 1


async def test_a_failing_statement_raises_sqlalchemys_error(db: Database) -> None:
    """What the store's callers catch (a unique violation, a lost connection) is
    SQLAlchemy's error, as from any statement."""
    statement = select(literal_column("x")).select_from(table("no_such_table"))
    async with db.engine.connect() as connection:
        with pytest.raises(DBAPIError, match="no_such_table"):
            await DriverStatement(statement).rows(connection, {})


async def test_a_parameter_rendered_at_execution_is_refused(db: Database) -> None:
    t = _THREADS.c
    statement = select(t.id).where(t.id.in_(bindparam("ids", expanding=True)))
    with pytest.raises(ValueError, match="rendered at execution"):
        async with db.one_statement() as runner:
            await DriverStatement(statement).rows(runner, {"ids": []})


async def test_a_missing_parameter_is_named(db: Database) -> None:
    with pytest.raises(KeyError, match="owner"):
        async with db.one_statement() as runner:
            await DriverStatement(_the_thread()).rows(runner, {"wanted": uuid.uuid4()})
