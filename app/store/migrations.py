"""Alembic from code: upgrade/downgrade a database and ask whether it is at head (/readyz).

The alembic command API is synchronous; it runs inside AsyncConnection.run_sync on a connection
we opened, and alembic/env.py uses that connection (config.attributes["connection"]).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import lru_cache
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import URL, Connection
from sqlalchemy.pool import NullPool

from app.store.db import Database, create_engine_for
from app.store.errors import DatabaseUnavailable, StoreError
from app.store.search_schema import is_search_schema_object
from app.store.unavailable import (
    is_unavailable,
    missing_database_sentence,
    unavailable_sentence,
)

ALEMBIC_DIR = Path(__file__).resolve().parents[2] / "alembic"


def alembic_config(url: str | URL | None = None) -> Config:
    """An alembic Config pointing at the project's alembic/ directory (no alembic.ini needed)."""
    config = Config()
    config.set_main_option("script_location", str(ALEMBIC_DIR))
    config.attributes["configure_logger"] = False
    if url is not None:
        config.attributes["url"] = str(url) if isinstance(url, str) else url.render_as_string(
            hide_password=False)
    return config


IncludeObject = Callable[[Any, str | None, str, bool, Any], bool]


def include_object_for(dialect_name: str) -> IncludeObject:
    """An alembic include_object hook that skips schema items meant for another backend
    (`Index(...).ddl_if(dialect=...)`). Alembic does not read ddl_if; without this, comparing a
    SQLite database with the models would report the PostgreSQL-only GIN index as missing."""

    def include_object(
        obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any
    ) -> bool:
        if reflected and compare_to is None and is_search_schema_object(name):
            return False  # full-text search objects live in migration 0003, not the models
        only_on = getattr(getattr(obj, "_ddl_if", None), "dialect", None)
        return only_on is None or only_on == dialect_name

    return include_object


async def _run_command(url: str | URL, name: str, revision: str) -> None:
    engine = create_engine_for(url, sqlite_foreign_keys=False, poolclass=NullPool)
    config = alembic_config(url)

    def run(connection: Connection) -> None:
        config.attributes["connection"] = connection
        getattr(command, name)(config, revision)

    try:
        async with engine.begin() as connection:
            await connection.run_sync(run)
    finally:
        await engine.dispose()


async def upgrade_to_head(url: str | URL) -> None:
    """Migrate the database at url to the newest revision (idempotent)."""
    await _run_command(url, "upgrade", "head")


async def downgrade_to_base(url: str | URL) -> None:
    """Undo every migration (tests; never the app)."""
    await _run_command(url, "downgrade", "base")


@lru_cache(maxsize=1)
def head_revisions() -> frozenset[str]:
    """The head revision(s) of the migration scripts."""
    return frozenset(ScriptDirectory.from_config(alembic_config()).get_heads())


class _NoContextSetupLines(logging.Filter):
    """Every MigrationContext logs at INFO which dialect and DDL mode it assumed, and /readyz
    makes one per probe: two lines a probe that say nothing. A real upgrade keeps its
    "Running upgrade" lines."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(("Context impl", "Will assume"))


logging.getLogger("alembic.runtime.migration").addFilter(_NoContextSetupLines())


async def current_revisions(db: Database) -> frozenset[str]:
    """The revision(s) the database is at (empty when never migrated)."""
    async with db.engine.connect() as connection:
        heads = await connection.run_sync(
            lambda sync: MigrationContext.configure(sync).get_current_heads()
        )
    return frozenset(heads)


async def is_at_head(db: Database) -> bool:
    """The database is migrated to the newest revision (/readyz)."""
    return await current_revisions(db) == head_revisions()


class NotMigrated(StoreError):
    """The database is not at the newest revision (new, wrong, or from an older release)."""


class DatabaseMissing(StoreError):
    """The PostgreSQL server has no database of that name; the message says how to make it."""


def reached_or_raise(url: str | URL, error: Exception) -> None:
    """Turn a failure to reach the database at start into the store's own one-sentence error
    (DatabaseMissing, DatabaseUnavailable); any other error is a bug and passes on."""
    missing = missing_database_sentence(url, error)
    if missing is not None:
        raise DatabaseMissing(missing) from error
    if is_unavailable(error):
        raise DatabaseUnavailable(unavailable_sentence(url, error)) from error


@asynccontextmanager
async def migrated_database(url: str | URL) -> AsyncIterator[Database]:
    """A Database for a script, checked to be at head first and disposed at the end: an
    operator who points a script at a new or wrong database gets one clear sentence instead of
    a traceback about a missing table."""
    db = Database(url)
    try:
        try:
            at_head = await is_at_head(db)
        except Exception as error:
            reached_or_raise(url, error)
            raise
        if not at_head:
            where = db.url.render_as_string(hide_password=True)
            raise NotMigrated(f"the database {where} is not migrated to the newest revision: "
                              "run `.venv/bin/alembic upgrade head` (scripts/serve does)")
        yield db
    finally:
        await db.dispose()
