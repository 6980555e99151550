"""What a database ran while a block ran, for tests that count a path's statements (each is
a round trip to PostgreSQL) or check that each runs as compiled once (out of SQLAlchemy's
compiled cache, or as SQL compiled before, with nothing rendered into its SQL at
execution)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.engine.interfaces import CacheStats

from app.store import driver_statements
from app.store.db import Database
from app.store.sqlite_writes import SqliteWrites


@contextmanager
def recorded_statements(db: Database) -> Iterator[list[tuple[str, bool]]]:
    """Each statement run while the block runs: its first word, and whether it ran as
    compiled: out of SQLAlchemy's compiled cache, or as the driver's SQL (a DriverStatement's,
    compiled once; on SQLite also on the sqlite3 connection itself, app.store.sqlite_writes),
    and with no parameter rendered into its SQL text at execution (an IN list is, each time,
    over the whole statement's text)."""
    statements: list[tuple[str, bool]] = []

    def note(_conn: Any, _cursor: Any, statement: str, _params: Any, context: Any,
             _many: bool) -> None:
        compiled = context.compiled
        if compiled is None:
            statements.append((statement.split()[0], True))
            return
        rendered = bool(compiled.post_compile_params)
        statements.append((statement.split()[0],
                           context.cache_hit == CacheStats.CACHE_HIT and not rendered))

    def note_sqlite(writes: SqliteWrites, sql: str, arguments: Any, *, many: bool = False
                    ) -> sqlite3.Cursor:
        statements.append((sql.split()[0], True))  # a DriverStatement's SQL
        return execute(writes, sql, arguments, many=many)

    execute = SqliteWrites._execute
    event.listen(db.engine.sync_engine, "before_cursor_execute", note)
    SqliteWrites._execute = note_sqlite  # type: ignore[method-assign]
    try:
        yield statements
    finally:
        SqliteWrites._execute = execute  # type: ignore[method-assign]
        event.remove(db.engine.sync_engine, "before_cursor_execute", note)


@contextmanager
def statements_in_transaction(db: Database) -> Iterator[list[tuple[str, bool]]]:
    """PostgreSQL: each statement run while the block runs, its first word and whether it
    ran inside a transaction block. A statement outside one is its only round trip; a
    transaction adds two, its BEGIN and its COMMIT."""
    assert db.backend == "postgresql", "transaction blocks are told by asyncpg"
    statements: list[tuple[str, bool]] = []

    def note(conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        driver = conn.connection.driver_connection
        statements.append((statement.split()[0], driver.is_in_transaction()))

    event.listen(db.engine.sync_engine, "after_cursor_execute", note)
    try:
        yield statements
    finally:
        event.remove(db.engine.sync_engine, "after_cursor_execute", note)


def driver_compiles(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Each compile of a DriverStatement's SQL from now on (the list grows as they happen):
    recorded_statements counts driver SQL as compiled, so a test that a statement is compiled
    once watches the compile itself."""
    compiles: list[object] = []
    compile_once = driver_statements._compile
    monkeypatch.setattr(driver_statements, "_compile",
                        lambda *args: compiles.append(args) or compile_once(*args))
    return compiles
