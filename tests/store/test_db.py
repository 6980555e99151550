"""The Database handle: UTC timestamps, SQLite settings, transactions, the default URL."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
from pathlib import Path

import asyncpg
import pytest
from sqlalchemy import select, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from app.keys import limits_repository as limits_store
from app.store.db import Database, DatabaseTimeouts
from app.store.models import RateLimitWindow, Thread
from app.threads import repository as threads_store
from tests.store.factories import new_thread
from tests.support.databases import postgres_only
from tests.support.statements import statements_in_transaction
from tests.support.waits import WITHIN_S


async def test_timestamps_are_aware_utc_whatever_zone_goes_in(db: Database) -> None:
    prague = dt.timezone(dt.timedelta(hours=2))
    moment = dt.datetime(2026, 3, 29, 1, 30, 15, 123456, tzinfo=prague)
    async with db.transaction() as s:
        s.add(Thread(user_id="alice", title="tz", autonomy={}, created_at=moment,
                     updated_at=moment))
    async with db.transaction() as s:
        [stored] = (await s.execute(select(Thread.created_at))).scalars().all()
        before = (await s.execute(select(Thread.id).where(
            Thread.created_at < moment + dt.timedelta(microseconds=1)))).scalars().all()
    assert stored == moment and stored.utcoffset() == dt.timedelta(0)
    assert stored.hour == 23 and len(before) == 1


async def test_naive_datetimes_are_refused(db: Database) -> None:
    with pytest.raises(Exception, match="naive datetime"):
        async with db.transaction() as s:
            s.add(Thread(user_id="alice", autonomy={}, created_at=dt.datetime(2026, 1, 1),
                         updated_at=dt.datetime(2026, 1, 1)))


async def test_transaction_rolls_back_on_error(db: Database) -> None:
    with pytest.raises(RuntimeError):
        async with db.transaction() as s:
            await threads_store.create_thread(s, "alice", "never")
            raise RuntimeError("boom")
    async with db.transaction() as s:
        assert await threads_store.list_threads(s, "alice") == []


async def test_a_one_statement_block_commits_each_statement_on_postgresql(
    db: Database
) -> None:
    """The promise a one_statement caller makes, and why it must keep it: on PostgreSQL a
    write commits as it ends, so an error after it rolls nothing back; on SQLite the block
    is a transaction like any other. Either way the connection goes back to the pool, and
    is back to transactions there."""
    minute = dt.datetime(2026, 11, 26, 12, 0, tzinfo=dt.UTC)
    with pytest.raises(RuntimeError):
        async with db.one_statement() as s:
            assert await limits_store.take_request(s, "alice", minute, 10)
            raise RuntimeError("after the write")
    with pytest.raises(RuntimeError):
        async with db.transaction(quick=True) as s:
            assert await limits_store.take_request(s, "bob", minute, 10)
            raise RuntimeError("after the write")
    assert db.engine.sync_engine.pool.checkedout() == 0  # type: ignore[attr-defined]
    async with db.transaction(read_only=True) as s:
        users = (await s.execute(select(RateLimitWindow.user_id))).scalars().all()
    assert users == (["alice"] if db.backend == "postgresql" else [])


async def test_a_one_statement_read_needs_neither_a_transaction_nor_the_write_lock(db: Database
                                                                               ) -> None:
    """A turn's one-statement read (its memory search) waits for no writer: on SQLite it
    reads beside a transaction holding the write lock (were it to queue for that lock, here
    it would wait for its own caller until the busy timeout failed it), and on PostgreSQL
    its statement is its one round trip, outside any transaction."""
    thread = await new_thread(db, "alice", "kept")

    async def title() -> str | None:
        async with db.one_statement(read_only=True) as r:
            return await r.scalar(select(Thread.title).where(Thread.id == thread.id))

    async with db.transaction() as writer:
        await threads_store.set_title(writer, thread.id, "not yet committed")
        if db.backend == "postgresql":
            with statements_in_transaction(db) as statements:
                assert await title() == "kept"
            assert statements == [("SELECT", False)]
        else:
            assert await title() == "kept"
    assert db.engine.sync_engine.pool.checkedout() == 0  # type: ignore[attr-defined]


async def test_sqlite_connection_settings(tmp_path: Path) -> None:
    db = Database(f"sqlite+aiosqlite:///{tmp_path}/settings.db")
    try:
        async with db.engine.connect() as connection:
            pragmas = {name: (await connection.exec_driver_sql(f"PRAGMA {name}")).scalar()
                       for name in ("foreign_keys", "journal_mode", "busy_timeout")}
    finally:
        await db.dispose()
    assert pragmas == {"foreign_keys": 1, "journal_mode": "wal", "busy_timeout": 30000}


async def test_default_url_creates_the_var_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from app.config.settings import get_settings

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CHATGATE_DATABASE_URL", raising=False)
    monkeypatch.delenv("DATABASE_URL", raising=False)
    get_settings.cache_clear()
    try:
        db = Database(get_settings().database_url)
        async with db.engine.connect() as connection:
            await connection.exec_driver_sql("SELECT 1")
        await db.dispose()
    finally:
        get_settings.cache_clear()
    assert db.backend == "sqlite"
    assert (tmp_path / "var" / "chatgate.db").exists()


async def test_concurrent_read_then_write_transactions_do_not_fail(db: Database) -> None:
    """Each transaction reads, yields, then writes: on SQLite a deferred BEGIN would fail with
    'database is locked'; BEGIN IMMEDIATE makes them wait their turn instead."""
    thread = await new_thread(db)

    async def read_then_write(n: int) -> None:
        async with db.transaction() as s:
            await s.execute(select(Thread).where(Thread.id == thread.id))
            await asyncio.sleep(0)
            await threads_store.set_title(s, thread.id, f"title {n}")

    await asyncio.gather(*(read_then_write(n) for n in range(20)))
    async with db.transaction() as s:
        title = await s.scalar(text("SELECT title FROM threads"))
    assert str(title).startswith("title ")


async def test_plain_driverless_urls_use_the_async_drivers(database_url: str) -> None:
    """`postgres://...` / `postgresql://...` / `sqlite:///...`, as hosting providers hand out
    DATABASE_URL, work for the store and for migrations alike."""
    from sqlalchemy.engine import make_url

    from app.store.migrations import current_revisions, head_revisions, upgrade_to_head

    url = make_url(database_url)
    plain_driver = "postgres" if url.get_backend_name() == "postgresql" else "sqlite"
    plain = url.set(drivername=plain_driver).render_as_string(hide_password=False)
    assert plain.startswith(f"{plain_driver}://")
    await upgrade_to_head(plain)
    db = Database(plain)
    try:
        assert db.url.drivername == url.drivername
        await new_thread(db)
        assert await current_revisions(db) == head_revisions()
    finally:
        await db.dispose()


@postgres_only("a SQLite connection is a file, no server closes it")
async def test_a_pooled_connection_the_server_closed_is_replaced_at_checkout(
    db: Database,
) -> None:
    """A restart, a failover or a terminated backend closes connections the pool holds: the
    next transaction gets a new connection instead of failing on the closed one."""
    async with db.transaction() as s:
        pid = await s.scalar(text("SELECT pg_backend_pid()"))
        pooled = (await (await s.connection()).get_raw_connection()).driver_connection
    killer = Database(db.url, poolclass=NullPool)
    try:
        async with killer.transaction() as s:
            assert await s.scalar(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
    finally:
        await killer.dispose()
    for _ in range(500):  # until the socket's end has reached the pooled connection
        if pooled is not None and pooled.is_closed():
            break
        await asyncio.sleep(0.01)
    async with db.transaction() as s:
        assert await s.scalar(text("SELECT pg_backend_pid()")) != pid


@postgres_only("a SQLite connection is a file, no server process behind it")
async def test_more_transactions_than_pooled_connections_wait_for_one_on_postgresql(
    db: Database,
) -> None:
    """A burst of more transactions than the pool's connections is served by those
    connections, one after another, and the server sees no connection beyond them: a
    connection opened for a burst and closed after it costs the server a new process, every
    few turns under a steady load just above the pool's size."""
    small = Database(db.url, postgres_pool_size=2)
    release = asyncio.Event()

    async def backend_pid() -> int:
        async with small.transaction() as s:
            pid = await s.scalar(text("SELECT pg_backend_pid()"))
            await release.wait()
        assert pid is not None
        return int(pid)

    try:
        burst = [asyncio.create_task(backend_pid()) for _ in range(6)]
        for _ in range(100):  # until the pool's two connections are taken
            if small.engine.sync_engine.pool.checkedout() == 2:  # type: ignore[attr-defined]
                break
            await asyncio.sleep(0.01)
        assert small.engine.sync_engine.pool.checkedout() == 2  # type: ignore[attr-defined]
        release.set()
        assert len(set(await asyncio.gather(*burst))) == 2
    finally:
        await small.dispose()


@postgres_only("a SQLite transaction is a file lock of this process, no server session")
async def test_a_transaction_its_process_left_idle_is_ended_by_the_server(
    db: Database, database_url: str,
) -> None:
    """A process cut off between a statement and its COMMIT leaves its transaction open on
    the server, with the thread row it locked. With idle_in_transaction_s the server ends that
    session, so another process may lock the row (a new turn in the thread); without it the
    row stayed locked until the server dropped the connection."""
    thread = await new_thread(db)
    cut_off = Database(database_url, timeouts=DatabaseTimeouts(idle_in_transaction_s=0.3))
    other = await asyncpg.connect(
        make_url(database_url).set(drivername="postgresql").render_as_string(
            hide_password=False))
    try:
        # set outside any transaction: a first transaction rolled back keeps it, and a
        # connection taken for LISTEN is not left in a transaction the bound would end
        connection = await cut_off.engine.connect()
        driver = (await connection.get_raw_connection()).driver_connection
        assert driver is not None and not driver.is_in_transaction()
        await connection.rollback()
        await connection.begin()
        assert await connection.scalar(text("SHOW idle_in_transaction_session_timeout")) \
            == "300ms"
        await connection.execute(select(Thread.id).where(Thread.id == thread.id)
                                 .with_for_update())
        # nothing more from the cut-off process: the other one's lock is granted once the
        # server has ended the idle transaction (bounded, in case it never does)
        locked = await other.fetchval("SELECT id FROM threads WHERE id = $1 FOR UPDATE",
                                      thread.id, timeout=WITHIN_S)
        assert locked == thread.id
        with contextlib.suppress(Exception):
            await connection.close()
    finally:
        await other.close()
        await cut_off.dispose()
