"""The one choice of a statement by the database that runs, for the repositories.

A repository whose SQL differs between PostgreSQL and SQLite names both versions side by side
in a PerDatabase and runs `.of(s)`: the version of the database `s` talks to. Repositories
never ask which database runs themselves, so every difference is written in one place, where
the two versions can be read against each other, and a third database would be one more field
here rather than a hunt through the branches. (The turn's repository, app.turn.rows, is the
other place: a module per database behind one interface, for writes too large for a pair.)

What the versions are is the repository's business: a statement built once, a function that
runs one, or None where a database needs no statement at all (SQLite's BEGIN IMMEDIATE already
serialises what PostgreSQL locks). An expression used inside statements that every database
writes its own way is a SQL element here, compiled per database (content_has_nul).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from sqlalchemy import Boolean, Table
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement

from app.store.db import Runner

T = TypeVar("T")
#: An INSERT with an ON CONFLICT clause: the two databases write it with their own insert().
Upsert = postgresql.Insert | sqlite.Insert
#: A function that takes either database's upsert and gives the same back.
UpsertT = TypeVar("UpsertT", postgresql.Insert, sqlite.Insert)
POSTGRES = "postgresql"


def dialect_of(runner: Runner) -> str:
    """'sqlite' or 'postgresql': the database `runner` (a session or a bare connection)
    talks to."""
    bind = runner if isinstance(runner, AsyncConnection) else runner.get_bind()
    return bind.dialect.name


@dataclass(frozen=True, slots=True)
class PerDatabase(Generic[T]):
    """One thing (a statement, a function, a value) in each database's version."""

    postgres: T
    sqlite: T

    def of(self, runner: Runner) -> T:
        """The version of the database `runner` talks to."""
        return self.postgres if dialect_of(runner) == POSTGRES else self.sqlite


def upserts(build: Callable[[Callable[[Table], Upsert]], T]) -> PerDatabase[T]:
    """An upsert (INSERT ... ON CONFLICT) built once for each database: `build` is given the
    database's insert() and returns what it makes with it; the clauses are the same on both.
    Built once: an upsert's `excluded` alias and SET clause cost more CPU to build than to
    run, and only its parameters change from call to call."""
    return PerDatabase(postgres=build(postgresql.insert), sqlite=build(sqlite.insert))


class content_has_nul(FunctionElement[bool]):
    """The text holds a NUL. Only SQLite can store one (the repair's rules drop it before
    they look, so `<!-\\0-` is a marker start the `<!--` test alone would never read)."""

    type = Boolean()
    inherit_cache = True
    name = "content_has_nul"


@compiles(content_has_nul, "sqlite")
def _has_nul_sqlite(element: content_has_nul, compiler: SQLCompiler, **kw: Any) -> str:
    return f"instr({compiler.process(element.clauses, **kw)}, char(0)) > 0"


@compiles(content_has_nul, "postgresql")
def _has_nul_pg(element: content_has_nul, compiler: SQLCompiler, **kw: Any) -> str:
    return "false"  # PostgreSQL text cannot hold NUL
