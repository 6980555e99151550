"""SQLite connections on which a statement is ONE trip to the connection's thread.

aiosqlite runs each sqlite3 call on a thread of the connection's own and hands the result
back to the event loop. SQLAlchemy's adapter makes three or four such trips per statement
(open a cursor, execute, fetch the rows, close the cursor); each costs a queue hand-off, a
thread wake-up and a wake-up of the event loop, more CPU than the statement itself. Here the
cursor is opened, run, read and closed in one trip, and its rows wait in memory for
SQLAlchemy to take them. A turn runs about a dozen statements: measured in process, its two
transactions cost 7.3 ms of CPU with SQLAlchemy's trips and 5.1 ms with these.

The connection is still aiosqlite's (its thread, queue, commit, rollback and close); only
its cursor changes, and a rollback with no transaction open makes no trip. SQLAlchemy gets
it through `create_async_engine(async_creator=...)`. Rows are read whole in the trip, as
SQLAlchemy reads an ordinary cursor's anyway; a streamed result (`stream_results`) would be
read whole too, so the store does not ask for one.

A quick transaction (`Database.transaction(quick=True)`: a turn's opening and its finish, a
few indexed statements) makes no trip at all: its statements, its COMMIT and a ROLLBACK run
on the event loop's own thread, which the connection allows (`check_same_thread=False`, and
SQLAlchemy never runs two statements of one connection at once). A trip costs little CPU,
but under load each one waits for a pass of the event loop over every other stream while
the transaction holds SQLite's one write lock: at 10 concurrent turns the next opening
waited about 45 ms for that lock. Without a trip the transaction runs from BEGIN to COMMIT
without letting another task in, so the lock is held for its CPU time only. Its BEGIN
IMMEDIATE is tried on the loop without waiting; when another process holds the lock, the
wait is on the thread, as before, and the loop runs on. WAL mode with `synchronous = NORMAL`
commits without a sync; the commit that runs SQLite's automatic checkpoint (every thousand
pages of log) syncs the file, 5 to 20 ms on this machine's disk, so the gateway's connections
run none: the gateway merges the log on a connection's thread instead
(Database.merge_sqlite_log, OneTripConnection.merge_log).

A read (`Database.transaction(read_only=True)`: statements that write nothing, such as a
memory search) begins with a deferred BEGIN, which takes no lock: in WAL mode a reader neither
waits for the writer nor holds it up. Its BEGIN and its COMMIT (which only ends its snapshot)
are instant and run on the loop. Its statements' cost the store does not bound, so each is
first run on the loop for at most READ_ON_LOOP_S: SQLite's progress handler looks at the clock
every READ_CHECK_STEPS steps of its virtual machine and stops the statement past that time,
and a stopped statement, which has changed nothing and leaves the read's snapshot open, is run
again on the thread. A trip costs more than the statement it carries when the statement is
small, as most are: a turn's memory search on a thread of 100 messages took a third more CPU
with its trip than without, and while four other tasks kept the loop busy it took 93 ms with
its trip (waiting for the GIL) and 1 ms without. A read's rollback still makes its trip: after
a cancellation, a statement may still be running on the thread, and the connection is never
used from two threads at once."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from functools import partial
from typing import Any, TypeVar

import aiosqlite
from sqlalchemy.engine import URL

T = TypeVar("T")

#: What one trip brings back: description, rowcount, lastrowid and every row.
_Outcome = tuple[Any, int, int | None, list[Any]]

#: The write-ahead log copied into the database file (OneTripConnection.merge_log), and the
#: log started again once all of it is (OneTripConnection.restart_log).
MERGE_LOG, RESTART_LOG = "PRAGMA wal_checkpoint(PASSIVE)", "PRAGMA wal_checkpoint(RESTART)"

#: True while the current task runs a quick transaction (set by app.store.db.Database).
ON_LOOP: ContextVar[bool] = ContextVar("chatgate_sqlite_on_loop", default=False)
#: True while the current task runs a read (set by app.store.db.Database).
READING: ContextVar[bool] = ContextVar("chatgate_sqlite_reading", default=False)

#: How a transaction begins: a writer takes the write lock up front (see app.store.db), a
#: reader takes none.
WRITE_BEGIN, READ_BEGIN = "BEGIN IMMEDIATE", "BEGIN"

#: SQLite's words for a lock another connection holds (SQLITE_BUSY).
_LOCKED = "database is locked"

#: How long a read's statement may hold the event loop before it is stopped and run again on
#: the connection's thread instead, and how many steps of SQLite's virtual machine go by
#: between two looks at the clock (a step is a fraction of a microsecond to a few, so a
#: statement is stopped at most a fraction of a millisecond late).
READ_ON_LOOP_S = 0.002
READ_CHECK_STEPS = 200


def _run(connection: sqlite3.Connection, many: bool, sql: str, parameters: Any) -> _Outcome:
    """On the connection's thread: the whole life of one cursor."""
    cursor = connection.cursor()
    try:
        if many:
            cursor.executemany(sql, parameters)
        else:
            cursor.execute(sql, parameters)
        rows = cursor.fetchall() if cursor.description else []
        return cursor.description, cursor.rowcount, cursor.lastrowid, rows
    finally:
        cursor.close()


def _merge_log(connection: sqlite3.Connection) -> tuple[int, int]:
    """SQLite's PASSIVE checkpoint: the log's frames copied into the database file, waiting
    for no reader and no writer; (frames in the log, frames copied)."""
    [(_, logged, copied)] = connection.execute(MERGE_LOG).fetchall()
    return int(logged), int(copied)


def _restart_log(connection: sqlite3.Connection, wait_ms: int, busy_timeout_ms: int) -> bool:
    """SQLite's RESTART checkpoint, waiting at most `wait_ms` for the write lock and for the
    readers of the log: True when the next commit writes the log from its start."""
    with _busy_timeout(connection, wait_ms, busy_timeout_ms):
        [(busy, _, _)] = connection.execute(RESTART_LOG).fetchall()
    return not busy


@contextmanager
def _busy_timeout(connection: sqlite3.Connection, wait_ms: int, busy_timeout_ms: int
                  ) -> Iterator[None]:
    """The connection waits at most `wait_ms` for a lock in the block, then
    `busy_timeout_ms` (its own) again."""
    connection.execute(f"PRAGMA busy_timeout = {wait_ms}")
    try:
        yield
    finally:
        connection.execute(f"PRAGMA busy_timeout = {busy_timeout_ms}")


class OneTripCursor:
    """The part of aiosqlite's Cursor that SQLAlchemy uses, rows read in the execute trip."""

    def __init__(self, connection: OneTripConnection) -> None:
        self._connection = connection
        self.description: Any = None
        self.rowcount = -1
        self.lastrowid: int | None = None
        self.arraysize = 1
        self._rows: list[Any] = []

    async def __aenter__(self) -> OneTripCursor:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        return None

    async def execute(self, sql: str, parameters: Sequence[Any] | None = None
                      ) -> OneTripCursor:
        return await self._trip(False, sql, () if parameters is None else parameters)

    async def executemany(self, sql: str, parameters: Iterable[Sequence[Any]]
                          ) -> OneTripCursor:
        return await self._trip(True, sql, parameters)

    async def _trip(self, many: bool, sql: str, parameters: Any) -> OneTripCursor:
        connection = self._connection
        outcome: _Outcome | None = None
        if ON_LOOP.get():
            outcome = connection.on_loop(many, sql, parameters)
        elif READING.get():
            outcome = connection.on_loop_briefly(many, sql, parameters)
        if outcome is None:
            outcome = await connection.on_thread(_run, many, sql, parameters)
        self.description, self.rowcount, self.lastrowid, self._rows = outcome
        return self

    async def fetchall(self) -> list[Any]:
        rows, self._rows = self._rows, []
        return rows

    async def fetchmany(self, size: int | None = None) -> list[Any]:
        count = self.arraysize if size is None else size
        rows, self._rows = self._rows[:count], self._rows[count:]
        return rows

    async def fetchone(self) -> Any:
        return self._rows.pop(0) if self._rows else None

    async def close(self) -> None:
        """Nothing to do: the sqlite3 cursor was closed in its trip."""
        self._rows = []


class OneTripConnection(aiosqlite.Connection):
    """aiosqlite's connection whose cursors make one trip per statement, or none in a quick
    transaction. `busy_timeout_ms` is the wait for another connection's write lock that the
    connection was opened with (its BEGIN on the loop waits none)."""

    def __init__(self, connector: Callable[[], sqlite3.Connection], busy_timeout_ms: int
                 ) -> None:
        super().__init__(connector, 64)
        self.busy_timeout_ms = busy_timeout_ms
        #: Seconds, for a read's time on the loop (tests move it by hand).
        self.clock: Callable[[], float] = time.perf_counter

    def cursor(self) -> OneTripCursor:  # type: ignore[override]
        return OneTripCursor(self)

    async def commit(self) -> None:
        """On the loop in a quick transaction (see the module's doc on checkpoints) and in a
        read."""
        if ON_LOOP.get() or READING.get():
            self._conn.commit()
        else:
            await super().commit()

    async def rollback(self) -> None:
        """Only when a transaction is open. The pool rolls back every connection given back
        to it, just in case; after a commit that is a trip for nothing, twice a turn."""
        if not self._conn.in_transaction:
            return
        if ON_LOOP.get():  # a read's goes behind any statement a cancellation left running
            self._conn.rollback()
        else:
            await super().rollback()

    @property
    def sqlite(self) -> sqlite3.Connection:
        """The sqlite3 connection itself, for statements run on the loop without a cursor
        of aiosqlite's (app.store.sqlite_writes)."""
        return self._conn

    async def merge_log(self) -> tuple[int, int]:
        """_merge_log on the connection's thread, where the file's sync does not hold the
        event loop."""
        return await self.on_thread(_merge_log)

    async def restart_log(self, wait_ms: int) -> bool:
        """_restart_log on the connection's thread."""
        return await self.on_thread(_restart_log, wait_ms, self.busy_timeout_ms)

    async def begin_write(self) -> None:
        """BEGIN IMMEDIATE as a quick transaction's: on the loop when the write lock is free,
        else waited for on the thread."""
        if self.on_loop(False, WRITE_BEGIN, ()) is None:
            await self.on_thread(_run, False, WRITE_BEGIN, ())

    def on_loop(self, many: bool, sql: str, parameters: Any) -> _Outcome | None:
        """The statement run here, on the event loop's thread; None for a BEGIN IMMEDIATE that
        would have to wait for another connection's write lock (run it on the thread
        instead)."""
        if sql != WRITE_BEGIN:
            return _run(self._conn, many, sql, parameters)
        with _busy_timeout(self._conn, 0, self.busy_timeout_ms):
            try:
                return _run(self._conn, many, sql, parameters)
            except sqlite3.OperationalError as exc:
                if _LOCKED not in str(exc):
                    raise
                return None

    def on_loop_briefly(self, many: bool, sql: str, parameters: Any) -> _Outcome | None:
        """A read's statement run here if it ends within READ_ON_LOOP_S; None when it was
        stopped (run it on the thread instead: it changed nothing, and the read's snapshot
        stays open)."""
        clock = self.clock
        deadline = clock() + READ_ON_LOOP_S
        self._conn.set_progress_handler(lambda: clock() > deadline, READ_CHECK_STEPS)
        try:
            return _run(self._conn, many, sql, parameters)
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode != sqlite3.SQLITE_INTERRUPT:
                raise
            return None
        finally:
            self._conn.set_progress_handler(None, 0)

    async def on_thread(self, function: Callable[..., T], *args: Any) -> T:
        """`function(sqlite3_connection, *args)` on the connection's thread."""
        result: T = await self._execute(  # type: ignore[no-untyped-call]
            function, self._conn, *args)
        return result


def one_trip_creator(url: URL, busy_timeout_ms: int
                     ) -> Callable[[], Awaitable[OneTripConnection]]:
    """What `create_async_engine(async_creator=...)` calls for a new connection: the file
    and options SQLAlchemy itself would open the URL with, and the busy timeout."""
    args, kwargs = url.get_dialect()().create_connect_args(url)
    kwargs["timeout"] = busy_timeout_ms / 1000

    async def connect() -> OneTripConnection:
        connection = OneTripConnection(partial(sqlite3.connect, *args, **kwargs),
                                       busy_timeout_ms)
        # As SQLAlchemy does for its own aiosqlite connections: a connection nobody closed
        # must not keep the interpreter from exiting.
        connection._thread.daemon = True
        await connection
        return connection

    return connect
