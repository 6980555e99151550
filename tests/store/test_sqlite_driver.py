"""SQLite statements make one trip each to the connection's thread, none in a quick
transaction, and still behave as the sqlite3 module's: rows, counts, many rows at once,
errors, transactions, another process's lock."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from app.store import db as db_module
from app.store.db import RESTART_LOG_WAIT_MS, SQLITE_BUSY_TIMEOUT_MS, Database
from app.store.sqlite_driver import READ_ON_LOOP_S, OneTripConnection
from tests.support.loop_passes import LoopPasses, behind_another_process_writer


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[Database]:
    database = Database(f"sqlite+aiosqlite:///{tmp_path}/driver.db")
    async with database.transaction() as s:
        await s.execute(text("CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT UNIQUE)"))
    yield database
    await database.dispose()


async def test_a_statement_is_one_trip_and_a_transaction_adds_its_begin_and_commit(
    db: Database, trips: list[str]
) -> None:
    async with db.transaction() as s:
        await s.execute(text("INSERT INTO t (name) VALUES ('a'), ('b')"))
        rows = (await s.execute(text("SELECT name FROM t ORDER BY id"))).all()
        changed = await s.execute(text("UPDATE t SET name = name || '!' WHERE name = 'a'"))
    assert [r.name for r in rows] == ["a", "b"]
    assert changed.rowcount == 1  # type: ignore[attr-defined]
    # BEGIN IMMEDIATE, the three statements, the commit; aiosqlite's own cursors take three
    # or four trips a statement.
    assert trips == ["_run"] * 4 + ["commit"]


async def test_many_rows_at_once_and_the_last_rowid(db: Database) -> None:
    async with db.transaction() as s:
        await s.execute(text("INSERT INTO t (name) VALUES (:name)"),
                        [{"name": f"n{i}"} for i in range(50)])
        inserted = await s.execute(text("INSERT INTO t (name) VALUES ('last')"))
        count = await s.scalar(text("SELECT count(*) FROM t"))
    assert count == 51
    assert inserted.lastrowid == 51  # type: ignore[attr-defined]


async def test_a_failed_statement_raises_the_usual_error_and_rolls_back(db: Database) -> None:
    async with db.transaction() as s:
        await s.execute(text("INSERT INTO t (name) VALUES ('taken')"))
    with pytest.raises(IntegrityError):
        async with db.transaction() as s:
            await s.execute(text("INSERT INTO t (name) VALUES ('kept back')"))
            await s.execute(text("INSERT INTO t (name) VALUES ('taken')"))
    async with db.transaction() as s:
        names = (await s.scalars(text("SELECT name FROM t"))).all()
    assert names == ["taken"]


async def test_a_quick_transaction_makes_no_trip_and_lets_no_other_task_in(
    db: Database, trips: list[str], passes: LoopPasses
) -> None:
    """Another task never runs in the middle: the write lock is held for the CPU time only."""
    before = passes.count
    async with db.transaction(quick=True) as s:
        await s.execute(text("INSERT INTO t (name) VALUES ('a'), ('b')"))
        rows = (await s.execute(text("SELECT name FROM t ORDER BY id"))).all()
    assert [r.name for r in rows] == ["a", "b"]
    assert trips == [] and passes.count == before
    # The other transactions still make their trips, and the loop runs between them.
    async with db.transaction() as s:
        assert await s.scalar(text("SELECT count(*) FROM t")) == 2
    assert trips == ["_run", "_run", "commit"] and passes.count > before


async def test_a_quick_transaction_that_fails_rolls_back_on_the_loop(
    db: Database, trips: list[str]
) -> None:
    async with db.transaction() as s:
        await s.execute(text("INSERT INTO t (name) VALUES ('taken')"))
    trips.clear()
    with pytest.raises(IntegrityError):
        async with db.transaction(quick=True) as s:
            await s.execute(text("INSERT INTO t (name) VALUES ('kept back')"))
            await s.execute(text("INSERT INTO t (name) VALUES ('taken')"))
    assert trips == []
    async with db.transaction(quick=True) as s:
        names = (await s.scalars(text("SELECT name FROM t"))).all()
    assert names == ["taken"]


async def test_a_quick_transaction_waits_for_another_process_lock_on_the_thread(
    db: Database, tmp_path: Path, trips: list[str], passes: LoopPasses
) -> None:
    """Another process's write transaction (a script, another gateway) must not stop the
    event loop: the BEGIN that cannot have the lock at once is not waited for on the loop
    (busy timeout 0 there) but on the thread, and the loop runs on meanwhile."""
    statements = traced_statements(db)
    await db.engine.dispose()
    async with db.transaction() as s:  # a new connection, traced
        await s.execute(text("SELECT 1"))
    trips.clear()
    async def quick_insert() -> None:
        async with db.transaction(quick=True) as s:
            await s.execute(text("INSERT INTO t (name) VALUES ('ours')"))

    await behind_another_process_writer(tmp_path / "driver.db", quick_insert, trips, passes)
    loop_thread = threading.get_ident()
    begins = [(on_loop == loop_thread, sql) for on_loop, sql in statements
              if "busy_timeout" in sql or sql.startswith("BEGIN")]
    assert begins[-4:] == [(True, "PRAGMA busy_timeout = 0"), (True, "BEGIN IMMEDIATE"),
                           (True, f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}"),
                           (False, "BEGIN IMMEDIATE")]
    async with db.transaction(quick=True) as s:
        names = (await s.scalars(text("SELECT name FROM t ORDER BY id"))).all()
    assert names == ["from the other process", "ours"]


async def test_a_read_neither_waits_for_nor_holds_up_a_writer(
    db: Database, tmp_path: Path, trips: list[str]
) -> None:
    """A read (a memory search before a turn) goes on while this process's writer, then
    another process's, holds the write lock, and sees what was committed only. A statement
    as short as this one makes no trip: its BEGIN, itself and its COMMIT run on the loop."""
    async with db.transaction() as s:
        await s.execute(text("INSERT INTO t (name) VALUES ('committed')"))
    writing, release = asyncio.Event(), asyncio.Event()

    async def our_writer() -> None:
        async with db.transaction() as s:
            await s.execute(text("INSERT INTO t (name) VALUES ('ours')"))
            writing.set()
            await release.wait()

    async def read_names() -> list[str]:
        trips.clear()
        async with asyncio.timeout(5), db.transaction(read_only=True) as s:
            names = list((await s.scalars(text("SELECT name FROM t ORDER BY id"))).all())
        # Only a new connection's set-up (the first time: the writer holds the pooled one).
        assert "_run" not in trips and "commit" not in trips
        return names

    writer = asyncio.create_task(our_writer())
    await writing.wait()
    assert await read_names() == ["committed"]
    release.set()
    await writer
    other = sqlite3.connect(tmp_path / "driver.db", isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        other.execute("INSERT INTO t (name) VALUES ('theirs')")
        assert await read_names() == ["committed", "ours"] and trips == []
    finally:
        other.close()


#: A statement of some 60,000 steps of SQLite's virtual machine: long enough for its
#: progress handler to look at the clock many times.
COUNTING = ("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 20000) "
            "SELECT count(*) FROM n")


class TickingClock:
    """A clock that moves `step` seconds each time it is read."""

    def __init__(self, step: float) -> None:
        self.now, self.step = 0.0, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


async def driver_of(s: AsyncSession) -> OneTripConnection:
    raw = await (await s.connection()).get_raw_connection()
    driver = raw.driver_connection
    assert isinstance(driver, OneTripConnection)
    return driver


async def test_a_read_statement_stays_on_the_loop_while_its_time_is_not_up(
    db: Database, trips: list[str], passes: LoopPasses
) -> None:
    """However many steps it takes: what counts is the time it holds the loop."""
    async with db.transaction(read_only=True) as s:
        (await driver_of(s)).clock = TickingClock(0.0)
        before = passes.count
        assert await s.scalar(text(COUNTING)) == 20000
        assert passes.count == before
    assert trips == []


async def test_a_read_statement_past_its_time_on_the_loop_runs_again_on_the_thread(
    db: Database, tmp_path: Path, trips: list[str], passes: LoopPasses
) -> None:
    """Stopped, it changed nothing: run again on the thread, it gives the whole answer, from
    the read's snapshot (a row committed meanwhile stays unseen), and the loop runs while it
    does. The connection is left as it was: a quick transaction's long statement on it is
    not stopped."""
    async with db.transaction() as s:
        await s.execute(text("INSERT INTO t (name) VALUES ('before')"))
    trips.clear()
    async with db.transaction(read_only=True) as s:
        (await driver_of(s)).clock = TickingClock(READ_ON_LOOP_S / 4)
        assert await s.scalar(text("SELECT count(*) FROM t")) == 1
        other = sqlite3.connect(tmp_path / "driver.db", isolation_level=None)
        other.execute("INSERT INTO t (name) VALUES ('meanwhile')")
        other.close()
        before = passes.count
        counted = await s.scalar(text(f"SELECT ({COUNTING}) + (SELECT count(*) FROM t)"))
        assert counted == 20001
        assert passes.count > before
    assert trips == ["_run"]
    async with db.transaction(quick=True) as s:
        assert await s.scalar(text(COUNTING)) == 20000
        assert await s.scalar(text("SELECT count(*) FROM t")) == 2
    assert trips == ["_run"]


async def test_a_read_that_fails_is_rolled_back_and_the_next_one_reads(
    db: Database, trips: list[str]
) -> None:
    with pytest.raises(ValueError):
        async with db.transaction(read_only=True) as s:
            assert await s.scalar(text("SELECT count(*) FROM t")) == 0
            raise ValueError("a bug in the caller")
    async with db.transaction(read_only=True) as s:
        assert await s.scalar(text("SELECT count(*) FROM t")) == 0
    assert trips == ["rollback"]  # on the thread, behind anything still running there


async def test_a_read_cancelled_mid_statement_is_rolled_back_behind_it(
    db: Database, trips: list[str]
) -> None:
    """A turn stopped during its memory search: the search may still be running on the
    connection's thread, and what ends the read (SQLAlchemy closes a connection whose
    statement was cancelled) waits for it there rather than racing it from the loop; the
    next read is served."""
    slow = text("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n "
                "WHERE i < 3000000) SELECT count(*) FROM n")

    async def search() -> None:
        async with db.transaction(read_only=True) as s:
            await s.scalar(slow)

    task = asyncio.create_task(search())
    for _ in range(10_000):  # until the statement is on the thread
        if trips:
            break
        await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    async with db.transaction(read_only=True) as s:
        assert await s.scalar(text("SELECT count(*) FROM t")) == 0
    assert trips[0] == "_run" and trips[1] in ("rollback", "close")
    assert "_run" not in trips[2:]  # the next read's statement, on the loop


def traced_statements(db: Database) -> list[tuple[int, str]]:
    """(thread id, SQL) of each statement that the database's new connections run."""
    seen: list[tuple[int, str]] = []

    @event.listens_for(db.engine.sync_engine, "connect")
    def _trace(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.driver_connection._conn.set_trace_callback(
            lambda sql: seen.append((threading.get_ident(), sql)))

    return seen


@pytest.fixture
async def merged_off_commit(tmp_path: Path) -> AsyncIterator[Database]:
    """A database as the gateway opens it: no commit merges the log."""
    database = Database(f"sqlite+aiosqlite:///{tmp_path}/log.db", sqlite_merge_on_commit=False)
    async with database.transaction() as s:
        await s.execute(text("CREATE TABLE pages (id INTEGER PRIMARY KEY, body BLOB)"))
    yield database
    await database.dispose()


async def write_pages(db: Database, commits: int) -> None:
    """`commits` quick transactions of about five pages of log each."""
    for _ in range(commits):
        async with db.transaction(quick=True) as s:
            await s.execute(text("INSERT INTO pages (body) VALUES (randomblob(16000))"))


async def test_a_commit_on_the_loop_leaves_the_log_to_the_merge_on_the_thread(
    merged_off_commit: Database,
) -> None:
    """SQLite's own checkpoint would have run inside the commit that passed 1,000 pages, and
    synced the file on the event loop; here the log keeps every frame until the merge, which
    copies them all on the connection's thread."""
    db = merged_off_commit
    statements = traced_statements(db)
    await db.engine.dispose()
    await write_pages(db, 300)
    logged, copied = await db.merge_sqlite_log()
    assert logged > 1_000 and copied == logged
    merged_on = [thread for thread, sql in statements if sql.startswith("PRAGMA wal_checkpoint")]
    assert merged_on and threading.get_ident() not in merged_on


async def test_after_a_whole_merge_the_next_commit_writes_the_log_from_its_start(
    merged_off_commit: Database, tmp_path: Path
) -> None:
    """Or the log file would grow for as long as commits come."""
    db = merged_off_commit
    await write_pages(db, 100)
    logged, copied = await db.merge_sqlite_log()
    assert logged > 100 and copied == logged
    await write_pages(db, 1)
    other = sqlite3.connect(tmp_path / "log.db", isolation_level=None)
    try:
        [(_, logged_now, _)] = other.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
    finally:
        other.close()
    assert 0 < logged_now < 20


async def test_the_restart_waits_for_no_other_writer_and_keeps_the_busy_timeout(
    merged_off_commit: Database, tmp_path: Path
) -> None:
    """The merge's restart of the log must not queue behind another process's transaction
    (the connection's busy timeout is 30 s), and leaves the connection's own wait as it was."""
    db = merged_off_commit
    await write_pages(db, 5)
    other = sqlite3.connect(tmp_path / "log.db", isolation_level=None)
    async with db.transaction() as s:
        driver = await driver_of(s)
    try:
        other.execute("BEGIN IMMEDIATE")
        assert await driver.restart_log(0) is False
        other.execute("COMMIT")
        assert await driver.restart_log(0) is True
    finally:
        other.close()
    async with db.transaction() as s:
        timeout = (await s.execute(text("PRAGMA busy_timeout"))).scalar_one()
    assert timeout == SQLITE_BUSY_TIMEOUT_MS


async def test_past_its_bound_the_log_is_restarted_behind_this_process_lock_a_moment_only(
    merged_off_commit: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader in the log (another process's) keeps the restart from happening at once;
    only a log past RESTART_LOG_FRAMES is worth waiting for it, RESTART_LOG_WAIT_MS and not
    the connection's 30 s, and this process's writers get the lock back after."""
    db = merged_off_commit
    statements = traced_statements(db)
    await db.engine.dispose()
    await write_pages(db, 5)
    statements.clear()  # a quick transaction's BEGIN sets its busy timeout too
    reader = sqlite3.connect(tmp_path / "log.db", isolation_level=None)
    try:
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM pages").fetchone()
        for bound in (1_000_000, 1):
            monkeypatch.setattr(db_module, "RESTART_LOG_FRAMES", bound)
            logged, copied = await asyncio.wait_for(db.merge_sqlite_log(), 10)
            assert logged and copied == logged
    finally:
        reader.close()
    waits = [sql for _, sql in statements if sql.startswith("PRAGMA busy_timeout = ")]
    assert waits.count(f"PRAGMA busy_timeout = {RESTART_LOG_WAIT_MS}") == 1  # the bound's
    assert waits.count("PRAGMA busy_timeout = 0") == 2  # each merge's try at once
    await asyncio.wait_for(write_pages(db, 1), 10)


async def test_a_reader_of_older_frames_keeps_them_and_the_merge_copies_what_it_can(
    merged_off_commit: Database, tmp_path: Path
) -> None:
    """A read in progress (another process's, here) still sees its snapshot: the merge
    neither waits for it nor restarts the log under it."""
    db = merged_off_commit
    await write_pages(db, 20)
    reader = sqlite3.connect(tmp_path / "log.db", isolation_level=None)
    try:
        reader.execute("BEGIN")
        seen = reader.execute("SELECT count(*) FROM pages").fetchone()
        await write_pages(db, 20)
        logged, copied = await db.merge_sqlite_log()
        assert copied < logged
        assert reader.execute("SELECT count(*) FROM pages").fetchone() == seen
        reader.execute("COMMIT")
    finally:
        reader.close()
    logged, copied = await db.merge_sqlite_log()
    assert copied == logged


async def test_the_scripts_databases_still_merge_the_log_on_commit(db: Database) -> None:
    """A script's Database runs no merging task: its commits keep SQLite's own checkpoint."""
    async with db.transaction() as s:
        assert (await s.execute(text("PRAGMA wal_autocheckpoint"))).scalar_one() == 1000
