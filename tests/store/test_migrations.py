"""Alembic on both backends: up, down, up; the migrated schema equals the models."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterator

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import (
    Boolean,
    Column,
    Integer,
    MetaData,
    Numeric,
    String,
    Table,
    Text,
    Uuid,
    insert,
    inspect,
    select,
)
from sqlalchemy.engine import Connection

from app.store.db import Database
from app.store.migrations import (
    _run_command,
    downgrade_to_base,
    include_object_for,
    is_at_head,
    upgrade_to_head,
)
from app.store.models import Base, Message, UserTokenUsage
from app.store.search_schema import is_search_schema_object
from app.store.types import JsonDocument, UtcDateTime
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


async def test_the_tree_migration_makes_every_thread_one_branch(empty_url: str) -> None:
    """Messages stored before threads were trees: each follows the message before it in its
    thread (a tie in time broken by id), and all are on the branch."""
    await upgrade_to_head(empty_url)
    await _run_command(empty_url, "downgrade", "0015_thread_origin")
    old = MetaData()
    threads = Table("threads", old, Column("id", Uuid), Column("user_id", String),
                    Column("autonomy", JsonDocument), Column("created_at", UtcDateTime),
                    Column("updated_at", UtcDateTime))
    messages = Table("messages", old, *(Column(name, Uuid) for name in ("id", "thread_id")),
                     Column("user_id", String), Column("role", String),
                     Column("content", Text), Column("metadata", JsonDocument),
                     Column("status", String), Column("synthetic", Boolean),
                     Column("created_at", UtcDateTime), Column("updated_at", UtcDateTime))
    at = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
    one, two = uuid.uuid4(), uuid.uuid4()
    tied = sorted([uuid.uuid4(), uuid.uuid4()])
    rows = [(one, uuid.uuid4(), at), (one, tied[0], at + dt.timedelta(seconds=1)),
            (one, tied[1], at + dt.timedelta(seconds=1)), (two, uuid.uuid4(), at)]
    db = Database(empty_url)
    try:
        async with db.engine.begin() as connection:
            await connection.execute(insert(threads), [
                {"id": t, "user_id": "u", "autonomy": {}, "created_at": at, "updated_at": at}
                for t in (one, two)])
            await connection.execute(insert(messages), [
                {"id": m, "thread_id": t, "user_id": "u", "role": "user", "content": "x",
                 "metadata": {}, "status": "complete", "synthetic": False,
                 "created_at": when, "updated_at": when} for t, m, when in rows])
    finally:
        await db.dispose()
    await upgrade_to_head(empty_url)
    db = Database(empty_url)
    try:
        async with db.transaction(read_only=True) as session:
            found = {m.id: (m.parent_id, m.on_branch) for m in
                     (await session.execute(select(Message))).scalars()}
    finally:
        await db.dispose()
    assert found == {rows[0][1]: (None, True), tied[0]: (rows[0][1], True),
                     tied[1]: (tied[0], True), rows[3][1]: (None, True)}


async def test_going_back_before_rollup_shards_merges_each_rollups_rows(empty_url: str) -> None:
    """Down to one row per (user, period, model): the shards' sums, a cost NULL only where
    every shard's was; up again, each merged row is shard 0."""
    await upgrade_to_head(empty_url)
    day = dt.date(2026, 11, 1)
    key = {"user_id": "u", "period_type": "day", "period_start": day}
    rows = [{**key, "model": "a", "shard": 0, "total_tokens": 10, "message_count": 1,
             "cost_usd": None, "unpriced_call_count": 1},
            {**key, "model": "a", "shard": 3, "total_tokens": 5, "message_count": 2,
             "cost_usd": 0.5, "unpriced_call_count": 0},
            {**key, "model": "b", "shard": 7, "total_tokens": 1, "message_count": 0,
             "cost_usd": None, "unpriced_call_count": 1}]
    db = Database(empty_url)
    try:
        async with db.transaction() as session:
            session.add_all(UserTokenUsage(**row) for row in rows)
        await _run_command(empty_url, "downgrade", "0016_message_tree")
        old = Table("user_token_usage", MetaData(), Column("model", String),
                    Column("total_tokens", Integer), Column("message_count", Integer),
                    Column("cost_usd", Numeric(18, 9, asdecimal=False)),
                    Column("unpriced_call_count", Integer))
        async with db.engine.connect() as connection:
            merged = (await connection.execute(select(old).order_by(old.c.model))).all()
        await upgrade_to_head(empty_url)
        async with db.transaction(read_only=True) as session:
            shards = (await session.execute(select(UserTokenUsage.shard))).scalars().all()
    finally:
        await db.dispose()
    assert [tuple(row) for row in merged] == [("a", 15, 3, 0.5, 1), ("b", 1, 0, None, 1)]
    assert shards == [0, 0]
