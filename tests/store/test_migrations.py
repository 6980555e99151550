"""Alembic on both backends: up, down, up; the migrated schema equals the models."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect
from sqlalchemy.engine import Connection

from app.store.db import Database
from app.store.migrations import (
    downgrade_to_base,
    include_object_for,
    is_at_head,
    upgrade_to_head,
)
from app.store.models import Base
from app.store.search_schema import is_search_schema_object
from tests.support.databases import drop_database, make_fresh_database_url

TABLES = {"threads", "messages", "llm_calls", "user_token_usage", "api_keys", "followups",
          "message_repairs", "stream_traces", "rate_limit_windows", "gateway_processes",
          "refusal_counts", "open_calls"}


@pytest.fixture
def empty_url(backend: str) -> Iterator[str]:
    url = make_fresh_database_url(backend, migrated=False)
    yield url
    drop_database(url)


def _diff(connection: Connection) -> list[object]:
    context = MigrationContext.configure(connection, opts={
        "compare_type": True, "include_object": include_object_for(connection.dialect.name)})
    return list(compare_metadata(context, Base.metadata))


def _tables_and_indexes(connection: Connection) -> tuple[set[str], set[str]]:
    inspector = inspect(connection)
    tables = {t for t in inspector.get_table_names()
              if t != "alembic_version" and not is_search_schema_object(t)}
    indexes = {ix["name"] for t in tables for ix in inspector.get_indexes(t) if ix["name"]}
    return tables, indexes


async def _inspect(url: str) -> tuple[bool, set[str], set[str], list[object]]:
    db = Database(url)
    try:
        async with db.engine.connect() as connection:
            tables, indexes = await connection.run_sync(_tables_and_indexes)
            diff = await connection.run_sync(_diff)
        return await is_at_head(db), tables, indexes, diff
    finally:
        await db.dispose()


async def test_up_down_up(empty_url: str, backend: str) -> None:
    at_head, tables, _, _ = await _inspect(empty_url)
    assert not at_head and tables == set()

    await upgrade_to_head(empty_url)
    at_head, tables, indexes, diff = await _inspect(empty_url)
    assert at_head and tables == TABLES
    assert diff == []
    assert {"uq_messages_one_streaming_per_thread", "ix_messages_user_streaming"} <= indexes
    assert ("ix_messages_metadata_gin" in indexes) == (backend == "postgresql")

    await downgrade_to_base(empty_url)
    at_head, tables, _, _ = await _inspect(empty_url)
    assert not at_head and tables == set()

    await upgrade_to_head(empty_url)
    await upgrade_to_head(empty_url)  # idempotent
    at_head, tables, _, diff = await _inspect(empty_url)
    assert at_head and tables == TABLES and diff == []


async def test_compare_detects_a_schema_drift(db: Database) -> None:
    """The no-diff assertion above can fail: drop an index and compare again."""
    from sqlalchemy import text

    async with db.transaction() as s:
        await s.execute(text("DROP INDEX ix_messages_user_created"))
    async with db.engine.connect() as connection:
        diff = await connection.run_sync(_diff)
    assert [d[0] for d in diff if isinstance(d, tuple)] == ["add_index"]
