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
read whole too, so the store does not ask for one."""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable, Iterable, Sequence
from functools import partial
from typing import Any

import aiosqlite
from sqlalchemy.engine import URL

#: What one trip brings back: description, rowcount, lastrowid and every row.
_Outcome = tuple[Any, int, int | None, list[Any]]


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
        self.description, self.rowcount, self.lastrowid, self._rows = (
            await self._connection.on_thread(_run, many, sql, parameters))
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
    """aiosqlite's connection whose cursors make one trip per statement."""

    def cursor(self) -> OneTripCursor:  # type: ignore[override]
        return OneTripCursor(self)

    async def rollback(self) -> None:
        """Only when a transaction is open. The pool rolls back every connection given back
        to it, just in case; after a commit that is a trip for nothing, twice a turn."""
        if self._conn.in_transaction:
            await super().rollback()

    async def on_thread(self, function: Callable[..., _Outcome], *args: Any) -> _Outcome:
        """`function(sqlite3_connection, *args)` on the connection's thread."""
        result: _Outcome = await self._execute(  # type: ignore[no-untyped-call]
            function, self._conn, *args)
        return result


def one_trip_creator(url: URL) -> Callable[[], Awaitable[OneTripConnection]]:
    """What `create_async_engine(async_creator=...)` calls for a new connection: the file
    and options SQLAlchemy itself would open the URL with."""
    args, kwargs = url.get_dialect()().create_connect_args(url)

    async def connect() -> OneTripConnection:
        connection = OneTripConnection(partial(sqlite3.connect, *args, **kwargs), 64)
        # As SQLAlchemy does for its own aiosqlite connections: a connection nobody closed
        # must not keep the interpreter from exiting.
        connection._thread.daemon = True
        await connection
        return connection

    return connect
