"""A turn's hot statements run from their compiled SQL, as the driver's own.

SQLAlchemy runs a Core statement by looking its compiled form up in a cache, building its
parameters, converting each with its type's bind processor and setting up a result for the
compiled columns. For the statements every turn runs once each on PostgreSQL (its opening and
its finish, thirty to sixty parameters each), that execution path cost about as much CPU as
the driver's work on the statement. Here a statement is compiled once per dialect, its
parameters built and converted by the same types' processors in the order its SQL takes them,
and the SQL run as the driver's (`exec_driver_sql`): SQLAlchemy still turns the driver's
errors into its own and invalidates a connection the server dropped. Its rows come back as
dicts of the statement's column names, converted by the columns' result processors (the
timestamps' aware UTC) as SQLAlchemy's rows would be. On SQLite a turn's writes run the same
compiled SQL on the sqlite3 connection itself (app.store.sqlite_writes)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import CursorResult, Select
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.dml import UpdateBase

from app.store.db import Runner

Processor = Callable[[Any], Any] | None


@dataclass(frozen=True, slots=True)
class _Parameter:
    """One positional parameter: its value taken from the caller's by its name, or the
    statement's own (a literal's), then converted by its type's bind processor."""

    name: str
    process: Processor
    #: The statement's own value; _GIVEN when the caller must give one.
    own: Any

    def value_in(self, params: Mapping[str, Any]) -> Any:
        given = self.own is _GIVEN or self.name in params
        value = params[self.name] if given else self.own
        return value if self.process is None else self.process(value)


#: The value of a parameter the caller gives (a KeyError names it when missing).
_GIVEN = object()


@dataclass(frozen=True, slots=True)
class _Compiled:
    """A statement's SQL for one dialect, with what its parameters and rows need."""

    sql: str
    #: Each positional parameter, in the SQL's order.
    parameters: tuple[_Parameter, ...]
    #: Each result column's processor, in the SQL's order.
    results: tuple[Processor, ...]

    def arguments(self, params: Mapping[str, Any]) -> tuple[Any, ...]:
        return tuple(parameter.value_in(params) for parameter in self.parameters)

    def rows(self, result: CursorResult[Any]) -> list[dict[str, Any]]:
        return self.rows_from(tuple(result.keys()), result.all())

    def rows_from(self, names: Sequence[str], rows: Iterable[Sequence[Any]]
                  ) -> list[dict[str, Any]]:
        """The driver's rows (tuples in the SQL's column order) as the statement's rows."""
        return [{name: value if process is None else process(value)
                 for name, process, value in zip(names, self.results, row, strict=True)}
                for row in rows]


#: What runs as the driver's SQL: a SELECT (with any data-modifying CTEs), or an INSERT,
#: UPDATE or DELETE (rows only with RETURNING).
Runnable = Select[Any] | UpdateBase


class DriverStatement:
    """A Core statement to run as the driver's SQL. Build it once, as the statement is, and
    call rows() at every execution."""

    def __init__(self, statement: Runnable) -> None:
        self.statement = statement
        self._by_dialect: dict[str, _Compiled] = {}

    async def rows(self, runner: Runner, params: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The statement's rows, run with `params` on the runner's connection (a session's
        is its transaction's)."""
        connection = (runner if isinstance(runner, AsyncConnection)
                      else await runner.connection())
        compiled = self.compiled_for(connection.dialect)
        result = await connection.exec_driver_sql(compiled.sql, compiled.arguments(params))
        return compiled.rows(result)

    def compiled_for(self, dialect: Dialect) -> _Compiled:
        compiled = self._by_dialect.get(dialect.name)
        if compiled is None:
            compiled = self._by_dialect[dialect.name] = _compile(self.statement, dialect)
        return compiled


def _compile(statement: Runnable, dialect: Dialect) -> _Compiled:
    """Raises ValueError for a statement this way cannot run: named (not positional)
    parameters, ones rendered at execution (an expanding IN list, a literal_execute), or
    ones whose value is computed at execution (a callable) or named apart from their key."""
    compiled = statement.compile(dialect=dialect)
    if not isinstance(compiled, SQLCompiler) or compiled.positiontup is None:
        raise ValueError("the driver's SQL needs a dialect with positional parameters")
    if compiled.literal_execute_params or compiled.post_compile_params:
        raise ValueError("a parameter rendered at execution cannot run as the driver's SQL")
    return _Compiled(compiled.string,
                     tuple(_parameter(compiled, name, dialect) for name in compiled.positiontup),
                     _result_processors(statement, dialect))


def _parameter(compiled: SQLCompiler, name: str, dialect: Dialect) -> _Parameter:
    bind = compiled.binds[name]
    if bind.callable is not None or (bind.required and bind.key != name):
        raise ValueError(f"the parameter {name} cannot run as the driver's SQL")
    process = bind.type.dialect_impl(dialect).bind_processor(dialect)
    return _Parameter(name, process, _GIVEN if bind.required else bind.value)


def _result_processors(statement: Runnable, dialect: Dialect) -> tuple[Processor, ...]:
    """Each column's a SELECT selects or a RETURNING returns (none without RETURNING)."""
    return tuple(column.type.dialect_impl(dialect).result_processor(dialect, None)
                 for column in statement.exported_columns)
