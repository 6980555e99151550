"""get_user_token_usage: the PostgreSQL function (alembic 0002) and its SQLAlchemy twin give
the same answer on the same data; figures checked by hand on both backends."""

from __future__ import annotations

import datetime as dt

import pytest
from sqlalchemy import text

from app.store.db import Database
from app.store.migrations import _run_command, upgrade_to_head
from app.usage import reports_repository as usage_reports
from app.usage.reports_repository import MessageUsage
from tests.store.factories import open_rows
from tests.support.databases import drop_database, make_fresh_database_url, require_postgres
from tests.usage_accounting.workload import (
    DAY1,
    DAY2,
    DAY3,
    at,
    finished_turn,
    mixed_workload,
    new_thread,
)

WINDOWS: list[tuple[dt.datetime | None, dt.datetime | None]] = [
    (None, None),
    (at(DAY1, 0), at(DAY2, 0)),
    (at(DAY1, 10), at(DAY3, 7)),  # start inclusive, end exclusive, mid-day edges
    (at(DAY2, 0), None),
    (None, at(DAY1, 0)),  # nothing before day 1
    (at(DAY3, 0), at(DAY1, 0)),  # reversed: empty
]


async def _with_legacy_rows(db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    await mixed_workload(db, monkeypatch)
    legacy = await new_thread(db, "alice")
    await finished_turn(db, monkeypatch, legacy, at(DAY2, 14), [], metadata={"model": "old"})


async def test_python_query_figures(db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    await _with_legacy_rows(db, monkeypatch)
    async with db.transaction() as s:
        everything = await usage_reports.get_user_token_usage(s, "alice", None, None)
        day1 = await usage_reports.get_user_token_usage(s, "alice", at(DAY1, 0), at(DAY2, 0))
        nobody = await usage_reports.get_user_token_usage(s, "nobody", None, None)
    # alice: 8 finished assistant messages (6 with calls, a failed one, a legacy one)
    # in 3 threads; tokens from metadata.tokens, legacy/failed rows add none
    assert everything.message_count == 8
    assert everything.conversation_count == 3
    assert everything.total_tokens == 25 + 1200 + 1500 + 833 + 3150 + 1200 + 14 + 820 + 690
    assert everything.first_message is not None and everything.last_message is not None
    assert everything.first_message.date() == DAY1
    assert everything.last_message.date() == DAY3
    # day 1: 09:00, 10:00, 23:59:59 turns
    assert (day1.message_count, day1.conversation_count) == (3, 1)
    assert day1.total_tokens == 25 + 1200 + 1500 + 833
    assert nobody == MessageUsage(0, 0, 0, None, None)


async def test_a_streaming_message_is_not_counted(db: Database) -> None:
    thread = await new_thread(db, "dave")
    await open_rows(db, thread, "q")
    async with db.transaction() as s:
        usage = await usage_reports.get_user_token_usage(s, "dave", None, None)
    assert usage.message_count == 0


@pytest.mark.postgres
async def test_sql_function_and_python_query_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    require_postgres()
    url = make_fresh_database_url("postgresql")
    db = Database(url)
    try:
        await _with_legacy_rows(db, monkeypatch)
        async with db.transaction() as s:
            for user in ("alice", "bob", "nobody"):
                for start, end in WINDOWS:
                    from_sql = await usage_reports.get_user_token_usage_sql_function(
                        s, user, start, end)
                    from_python = await usage_reports.get_user_token_usage_query(
                        s, user, start, end)
                    assert from_sql == from_python, (user, start, end)
            # the dispatcher really calls the function on PostgreSQL
            assert (await usage_reports.get_user_token_usage(s, "alice", None, None)
                    ).message_count == 8
    finally:
        await db.dispose()
        drop_database(url)


@pytest.mark.postgres
async def test_migration_creates_and_drops_the_function() -> None:
    require_postgres()
    url = make_fresh_database_url("postgresql")
    exists = text("SELECT count(*) FROM pg_proc WHERE proname = 'get_user_token_usage'")

    async def count() -> int:
        db = Database(url)
        try:
            async with db.transaction() as s:
                return int(await s.scalar(exists) or 0)
        finally:
            await db.dispose()

    try:
        assert await count() == 1
        await _run_command(url, "downgrade", "0001")
        assert await count() == 0
        await upgrade_to_head(url)
        assert await count() == 1
    finally:
        drop_database(url)


async def test_migration_is_a_no_op_on_sqlite() -> None:
    url = make_fresh_database_url("sqlite")
    try:
        await _run_command(url, "downgrade", "0001")
        await upgrade_to_head(url)
        db = Database(url)
        try:
            async with db.transaction() as s:
                usage = await usage_reports.get_user_token_usage(s, "x", None, None)
        finally:
            await db.dispose()
        assert usage.message_count == 0
    finally:
        drop_database(url)
