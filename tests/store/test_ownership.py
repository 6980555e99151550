"""A user's thread is found by its primary key alone (app.store.ownership): on a PostgreSQL
that has never analysed the tables, a generic plan of `id = :id AND user_id = :user` read
every thread of the user's at each turn's opening."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

import asyncpg
import pytest
from sqlalchemy import text

from app.core.clock import utcnow
from app.store.db import Database
from app.store.driver_statements import DriverStatement
from app.store.models import Thread
from app.turn.rows import Opened, OpeningRequest, turn_rows
from app.turn.rows.statements import OPEN_THREAD
from tests.store.factories import new_thread
from tests.support.databases import postgres_only

THREADS_OF_THE_USER = 300
pytestmark = postgres_only("SQLite takes the key without statistics; the plans are PostgreSQL's")


@pytest.fixture
def pg(db: Database) -> Database:
    assert db.backend == "postgresql"
    return db


async def _a_user_with_many_threads(db: Database) -> Thread:
    """Its threads, on a table nothing will analyse while the test runs."""
    async with db.transaction() as s:
        await s.execute(text("ALTER TABLE threads SET (autovacuum_enabled = false)"))
        s.add_all(Thread(id=uuid.uuid4(), user_id="alice", autonomy={}, created_at=utcnow(),
                         updated_at=utcnow()) for _ in range(THREADS_OF_THE_USER))
    return await new_thread(db, "alice")


async def _generic_plan(db: Database, database_url: str, statement: DriverStatement,
                        params: Mapping[str, Any]) -> str:
    """The plan PostgreSQL keeps for the statement once it chooses a generic one, on tables
    with no statistics (the test's database is fresh, and its threads never analysed)."""
    compiled = statement.compiled_for(db.engine.dialect)
    arguments = compiled.arguments(params)
    connection = await asyncpg.connect(database_url.replace("+asyncpg", ""))
    try:
        await connection.execute("SET plan_cache_mode = force_generic_plan")
        await connection.execute(f"PREPARE probe AS {compiled.sql}")
        literals = ", ".join(_literal(argument) for argument in arguments)
        rows = await connection.fetch(f"EXPLAIN EXECUTE probe({literals})")
    finally:
        await connection.close()
    return "\n".join(row[0] for row in rows)


def _literal(value: Any) -> str:
    """EXECUTE takes no parameters: each value as a literal, cast to its parameter's type."""
    if value is None:
        return "NULL"
    if isinstance(value, bool | int | float | Decimal):
        return str(value)
    return "'" + str(value).replace("'", "''") + "'"


def _reads_the_thread_by_key(plan: str) -> bool:
    return "using pk_threads" in plan and "ix_threads_user_updated" not in plan


async def test_opening_a_turn_in_a_transaction_reads_the_thread_by_key(
        pg: Database, database_url: str) -> None:
    thread = await _a_user_with_many_threads(pg)
    plan = await _generic_plan(pg, database_url, DriverStatement(OPEN_THREAD),
                               {"thread_id": thread.id, "owner": "alice", "now": utcnow()})
    assert _reads_the_thread_by_key(plan), plan


async def test_the_one_statement_opening_reads_the_thread_by_key(
        pg: Database, database_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    thread = await _a_user_with_many_threads(pg)
    ran: list[tuple[DriverStatement, Mapping[str, Any]]] = []
    rows = DriverStatement.rows

    async def recorded(self: DriverStatement, runner: Any, params: Mapping[str, Any]
                       ) -> list[dict[str, Any]]:
        ran.append((self, params))
        return await rows(self, runner, params)

    monkeypatch.setattr(DriverStatement, "rows", recorded)
    opening = await turn_rows(pg).open(
        OpeningRequest("alice", thread.id, "hello", history_limit=10, stream_cap=8))
    assert isinstance(opening, Opened), opening
    [(statement, params)] = ran
    assert _reads_the_thread_by_key(await _generic_plan(pg, database_url, statement, params))
