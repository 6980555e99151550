"""SQLite: a turn's hot writes as the sqlite3 connection's own statements, on the event loop.

A quick transaction (app.store.sqlite_driver) already runs on the loop without a trip to the
connection's thread; what it still costs is SQLAlchemy's: the session, the execution context
of each statement, the result. Measured in process (300 of each, fresh threads, CPU each):
a turn's opening 1.33 to 1.43 ms through a session, 0.67 to 0.72 ms here; its finish 1.40 to
2.00 ms and 0.76 to 1.04 ms. Each statement here is a DriverStatement, compiled once by
SQLAlchemy, its parameters and rows converted by the same types' processors, so the rows
written and read are the ones a session would write and read. SQLite's errors are raised as
SQLAlchemy's (an IntegrityError is SQLAlchemy's IntegrityError), as every caller of the store
expects. The connection, its write lock (BEGIN IMMEDIATE, waited for on the thread when
another process holds it) and the commit are Database.sqlite_writes()'."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Protocol

from sqlalchemy.engine import Dialect
from sqlalchemy.exc import DBAPIError


class CompiledSql(Protocol):
    """A statement's SQL for one dialect (app.store.driver_statements)."""

    @property
    def sql(self) -> str: ...

    def arguments(self, params: Mapping[str, Any]) -> tuple[Any, ...]: ...

    def rows_from(self, names: Sequence[str], rows: Iterable[Sequence[Any]]
                  ) -> list[dict[str, Any]]: ...


class Statement(Protocol):
    """What this module runs: an app.store.driver_statements.DriverStatement, named by its
    shape here (app.store.db, which runs this module's transactions, is imported by that
    module)."""

    def compiled_for(self, dialect: Dialect) -> CompiledSql: ...


class SqliteWrites:
    """The statements of one write transaction, on its sqlite3 connection."""

    def __init__(self, connection: sqlite3.Connection, dialect: Dialect) -> None:
        self._connection = connection
        self._dialect = dialect

    def rows(self, statement: Statement, params: Mapping[str, Any]
             ) -> list[dict[str, Any]]:
        """The statement's rows (a SELECT's, or an UPDATE's RETURNING)."""
        compiled = statement.compiled_for(self._dialect)
        cursor = self._execute(compiled.sql, compiled.arguments(params))
        try:
            names = [column[0] for column in cursor.description or ()]
            return compiled.rows_from(names, cursor.fetchall())
        finally:
            cursor.close()

    def scalar(self, statement: Statement, params: Mapping[str, Any]) -> Any:
        """The first column of the statement's first row (None without a row)."""
        rows = self.rows(statement, params)
        return next(iter(rows[0].values())) if rows else None

    def run(self, statement: Statement, params: Mapping[str, Any]) -> int:
        """A statement that returns no rows; how many rows it changed."""
        compiled = statement.compiled_for(self._dialect)
        return self._execute(compiled.sql, compiled.arguments(params)).rowcount

    def run_many(self, statement: Statement, many: Sequence[Mapping[str, Any]]) -> None:
        """A statement that returns no rows, once for each of `many` (as executemany)."""
        compiled = statement.compiled_for(self._dialect)
        self._execute(compiled.sql, [compiled.arguments(params) for params in many], many=True)

    def _execute(self, sql: str, arguments: Any, *, many: bool = False) -> sqlite3.Cursor:
        with sqlalchemy_errors(sql, arguments):
            if many:
                return self._connection.executemany(sql, arguments)
            return self._connection.execute(sql, arguments)


@contextmanager
def sqlalchemy_errors(sql: str, arguments: Any) -> Iterator[None]:
    """sqlite3's errors raised as the SQLAlchemy errors a session's statement would raise."""
    try:
        yield
    except sqlite3.Error as exc:
        raise DBAPIError.instance(sql, arguments, exc, sqlite3.Error) from exc
