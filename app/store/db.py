"""The database handle: one async engine and short transactions.

SQLite (the embedded default) gets a connect hook that turns on foreign keys, WAL and a busy
timeout, and every transaction starts with BEGIN IMMEDIATE: a deferred transaction that reads and
then writes fails at once with "database is locked" when another connection wrote in between,
whereas BEGIN IMMEDIATE takes the write lock up front and waits (busy_timeout) for its turn.
Taking over BEGIN from the sqlite3 module also makes SAVEPOINT (begin_nested) work.
Within one process, SQLite transactions also queue on an asyncio.Lock: SQLite's busy handler
waits by sleeping (up to 100 ms a try), so letting coroutines of one process fight over the file
lock wastes time that a FIFO queue does not. Other processes still meet the busy timeout.

Every wait on the database is bounded (DatabaseTimeouts), so that a database that stops
answering without closing its sockets (a network partition, a hung server) costs a request
the bound and a 503, not a hang: on PostgreSQL the connect (asyncpg's `timeout`), each
statement (asyncpg's `command_timeout`) and the pool's checkout; the gateway's sockets carry
TCP keepalive, so a peer that vanished is noticed even on a connection nobody is using. A
statement that timed out leaves its connection waiting for an answer that may never come, so
the connection is closed at once (not returned to the pool, nor closed politely, which would
wait for the server again). On SQLite the only wait is for another
writer's lock (the busy timeout) and the pool's checkout.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import URL, Connection, ExceptionContext
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.ext.asyncio import (
    AsyncConnection,
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)

from app.config.database_urls import async_url
from app.store.errors import DatabaseBusy, DatabaseUnavailable, StoreError
from app.store.pooler import through_transaction_pooler
from app.store.sqlite_driver import (
    ON_LOOP,
    READ_BEGIN,
    READING,
    WRITE_BEGIN,
    OneTripConnection,
    one_trip_creator,
)
from app.store.sqlite_writes import SqliteWrites, sqlalchemy_errors
from app.store.unavailable import is_pool_timeout, is_unavailable, unavailable_sentence

SQLITE_BUSY_TIMEOUT_MS = 30_000
#: Log frames (pages) past which Database.merge_sqlite_log keeps this process's writers out
#: to restart the log: SQLite's own automatic checkpoint runs at 1,000.
RESTART_LOG_FRAMES = 4_000
#: How long that restart waits for another process's writer and for readers of the log.
RESTART_LOG_WAIT_MS = 100
#: PostgreSQL connections a process keeps open (see create_engine_for).
POSTGRES_POOL_SIZE = 20
#: TCP keepalive of PostgreSQL sockets, both ends: the first probe after this many seconds of
#: silence, then one every KEEPALIVE_INTERVAL_S, the peer dead after KEEPALIVE_COUNT unanswered.
KEEPALIVE_IDLE_S, KEEPALIVE_INTERVAL_S, KEEPALIVE_COUNT = 30, 10, 3


@dataclass(frozen=True, slots=True)
class DatabaseTimeouts:
    """How long the store waits for the database, in seconds (app.config.settings has the operator's
    values; these defaults are for scripts and tests). None: no bound (migrations, whose
    statements may rightly run for minutes, pass statement_s=None).

    connect_s: a new PostgreSQL connection, handshake and authentication included.
    statement_s: each PostgreSQL statement's answer (a transaction's BEGIN and COMMIT too).
    pool_s: a free pooled connection (both databases); past it, DatabaseBusy.
    idle_in_transaction_s: how long PostgreSQL keeps a transaction whose client sent nothing
    more (a process cut off between a statement and its COMMIT) before it ends the session
    and releases its row locks; otherwise a thread row such a transaction locked refuses new
    turns until the server drops the connection, hours without keepalive. Set on each direct
    connection, the server's own value kept when it is stricter; through a transaction
    pooler the pooler's `idle_transaction_timeout` applies instead."""

    connect_s: float = 5.0
    statement_s: float | None = 10.0
    pool_s: float = 30.0
    idle_in_transaction_s: float | None = None

#: What a store function that writes with one statement runs it on: a session in a
#: transaction, or, in Database.one_statement's block on PostgreSQL, a bare connection.
Runner = AsyncSession | AsyncConnection


def _prepare_sqlite_file(url: URL) -> None:
    """Create the directory of a SQLite file so a fresh checkout starts with zero set-up."""
    database = url.database
    if database and database != ":memory:" and not database.startswith("file:"):
        Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)


def _install_sqlite_hooks(engine: AsyncEngine, *, foreign_keys: bool, busy_timeout_ms: int,
                          merge_on_commit: bool) -> None:
    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # we issue BEGIN ourselves (see module doc)
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {busy_timeout_ms}")
        cursor.execute("PRAGMA journal_mode = WAL")
        cursor.execute("PRAGMA synchronous = NORMAL")
        cursor.execute(f"PRAGMA foreign_keys = {'ON' if foreign_keys else 'OFF'}")
        if not merge_on_commit:
            cursor.execute("PRAGMA wal_autocheckpoint = 0")
        cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(connection: Connection) -> None:
        connection.exec_driver_sql(READ_BEGIN if READING.get() else WRITE_BEGIN)


def create_engine_for(
    url: str | URL, *, sqlite_foreign_keys: bool = True,
    sqlite_busy_timeout_ms: int = SQLITE_BUSY_TIMEOUT_MS, sqlite_merge_on_commit: bool = True,
    postgres_pool_size: int = POSTGRES_POOL_SIZE,
    timeouts: DatabaseTimeouts = DatabaseTimeouts(statement_s=None),
    transaction_pooler: bool = False, **engine_kwargs: Any
) -> AsyncEngine:
    """An AsyncEngine with the per-backend settings the store relies on.

    Migrations pass sqlite_foreign_keys=False: SQLite batch migrations copy and drop tables, and
    with foreign keys on, dropping a parent table would cascade-delete its children.
    sqlite_merge_on_commit=False: no commit copies the write-ahead log into the database file
    (SQLite's automatic checkpoint); Database.merge_sqlite_log must, as the gateway's
    background task does.
    `timeouts`: see DatabaseTimeouts; by default no statement bound (alembic's engine).
    transaction_pooler: PostgreSQL reached through PgBouncer in transaction mode
    (app.store.pooler: no statement kept on the server).
    """
    parsed = async_url(url)
    if parsed.get_backend_name() == "sqlite":
        _prepare_sqlite_file(parsed)
        if "poolclass" not in engine_kwargs:
            # A small pool: SQLite has one writer at a time; WAL lets readers run beside it.
            engine_kwargs.setdefault("pool_size", 5)
            engine_kwargs.setdefault("max_overflow", 5)
            # The connection returned last goes out first: the writes, one at a time, keep
            # to one connection. A commit on another connection empties a connection's page
            # cache, and handed round the pool each write read again (from the log) the
            # pages the others had written, about 70 reads a turn.
            engine_kwargs.setdefault("pool_use_lifo", True)
            engine_kwargs.setdefault("pool_timeout", timeouts.pool_s)
        engine_kwargs.setdefault("async_creator", one_trip_creator(parsed, sqlite_busy_timeout_ms))
        engine = create_async_engine(parsed, **engine_kwargs)
        _install_sqlite_hooks(engine, foreign_keys=sqlite_foreign_keys,
                              busy_timeout_ms=sqlite_busy_timeout_ms,
                              merge_on_commit=sqlite_merge_on_commit)
        return engine
    # PostgreSQL: connections are shared by short transactions, never held while streaming;
    # several gateway processes each keep their own pool. No overflow: an overflow
    # connection is closed as soon as it is returned, so a load just above the pool's size
    # opened a new one every few turns, a server process forked and started and a handshake
    # in the gateway each time, which halved the turns a second at 20 concurrent streams.
    # A statement that finds every connection in use waits for one instead.
    if "poolclass" not in engine_kwargs:
        engine_kwargs.setdefault("pool_size", postgres_pool_size)
        engine_kwargs.setdefault("max_overflow", 0)
        engine_kwargs.setdefault("pool_recycle", 1800)
        engine_kwargs.setdefault("pool_timeout", timeouts.pool_s)
    engine_kwargs["connect_args"] = _postgres_connect_args(
        timeouts, engine_kwargs.get("connect_args", {}))
    if transaction_pooler:
        parsed, engine_kwargs["connect_args"] = through_transaction_pooler(
            parsed, engine_kwargs["connect_args"])
    engine = create_async_engine(parsed, **engine_kwargs)
    if not engine_kwargs.get("pool_pre_ping"):
        _install_closed_check(engine)
    _install_bounded_waits(engine)
    if timeouts.idle_in_transaction_s is not None and not transaction_pooler:
        _install_idle_transaction_bound(engine, round(timeouts.idle_in_transaction_s * 1000))
    return engine


#: The session's idle-in-transaction bound: `bound` milliseconds, or the server's own value
#: when that is set and stricter. A plain statement, not a startup parameter: PgBouncer in
#: session mode refuses startup parameters it does not know.
_BOUND_IDLE_TRANSACTIONS = """
SELECT set_config('idle_in_transaction_session_timeout',
                  (CASE WHEN setting::int = 0 THEN {bound} ELSE least(setting::int, {bound})
                   END)::text, false)
FROM pg_settings WHERE name = 'idle_in_transaction_session_timeout'
"""


def _install_idle_transaction_bound(engine: AsyncEngine, bound_ms: int) -> None:
    """DatabaseTimeouts.idle_in_transaction_s on every new connection, set on the driver's
    connection outside any transaction: through SQLAlchemy's cursor it would open one, which
    a first transaction rolled back would take the setting back with, and which a LISTEN
    connection (app.store.notify) would keep open until the bound ended it."""
    statement = _BOUND_IDLE_TRANSACTIONS.format(bound=int(bound_ms))

    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.run_async(lambda driver: driver.execute(statement))


def _postgres_connect_args(timeouts: DatabaseTimeouts, given: dict[str, Any]
                           ) -> dict[str, Any]:
    """asyncpg's connect arguments: the connect and statement bounds (what the caller gave
    wins). No server_settings: PgBouncer refuses a connection whose startup packet carries a
    parameter it does not know (tcp_keepalives_*, statement_timeout), so the server's end of
    keepalive is the server's configuration (docs/production.md)."""
    return {"timeout": timeouts.connect_s, "command_timeout": timeouts.statement_s, **given}


def _keep_alive(sock: socket.socket) -> None:
    """The gateway's end of TCP keepalive on a PostgreSQL socket (asyncpg has no option for
    it): an idle pooled connection to a peer that vanished fails instead of waiting for the
    first statement to time out."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for name, value in (("TCP_KEEPIDLE", KEEPALIVE_IDLE_S), ("TCP_KEEPINTVL",
                        KEEPALIVE_INTERVAL_S), ("TCP_KEEPCNT", KEEPALIVE_COUNT)):
        option = getattr(socket, name, None)  # Linux's names; macOS has TCP_KEEPALIVE
        if option is not None:
            sock.setsockopt(socket.IPPROTO_TCP, option, value)


def _timed_out(exc: BaseException | None) -> bool:
    """A bound of asyncpg's (connect, statement, cancellation) ran out: asyncio's
    TimeoutError, raised as is through SQLAlchemy, which wraps only the driver's own errors."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, TimeoutError):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False


def _install_bounded_waits(engine: AsyncEngine) -> None:
    """Keepalive on every new connection's socket, and a statement that timed out counted as
    a lost connection. Otherwise SQLAlchemy would return the connection to the pool through
    a ROLLBACK, which waits on the server again (asyncpg first waits for the timed-out
    statement's cancellation), and then hand it to the next request. The server finishes a
    statement cut off this way on its own (or at its statement_timeout, if one is set)."""

    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        transport = getattr(dbapi_connection.driver_connection, "_transport", None)
        sock = transport.get_extra_info("socket") if transport is not None else None
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            _keep_alive(sock)

    @event.listens_for(engine.sync_engine, "handle_error")
    def _on_error(context: ExceptionContext) -> None:
        if not _timed_out(context.original_exception):
            return
        context.is_disconnect = True
        # This connection only: a slow statement on a healthy server says nothing of the
        # pool's other connections (in a partition each fails at its next statement).
        context.invalidate_pool_on_disconnect = False
        if context.connection is not None and not context.connection.invalidated:
            driver = context.connection.connection.driver_connection
            if driver is not None:
                driver.terminate()


def _install_closed_check(engine: AsyncEngine) -> None:
    """A pooled connection the server closed (a restart, a failover, a terminated backend) is
    replaced at checkout. asyncpg knows it without a round trip: the socket's end reached its
    protocol while the connection sat in the pool. SQLAlchemy's pre-ping asked the server
    instead, a round trip at every checkout, twice a turn. (A connection cut without a word,
    no FIN or RST, fails its first statement at the statement timeout, or sooner when TCP
    keepalive has given up on it; the turn's finish retries.)"""

    @event.listens_for(engine.sync_engine, "checkout")
    def _on_checkout(_dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        if record.driver_connection.is_closed():
            raise DisconnectionError("the server closed this pooled connection")


class Database:
    """The engine and a session factory, and the three ways in to the store:
    `transaction()` for everything but a turn's hot path (`read_only` for what only reads);
    `one_statement()` for a turn's one-statement reads and writes, which on PostgreSQL need
    no transaction; `sqlite_writes()` for the turn repository's own writes on SQLite.

    The URL is always given: the store does not read the gateway's settings, so whoever starts
    the process (app.gateway.main, app.cli for the scripts, the tests) decides which database
    it is."""

    def __init__(self, url: str | URL, *, sqlite_busy_timeout_s: float | None = None,
                 sqlite_merge_on_commit: bool = True,
                 postgres_pool_size: int = POSTGRES_POOL_SIZE,
                 timeouts: DatabaseTimeouts = DatabaseTimeouts(),
                 **engine_kwargs: Any) -> None:
        self.url: URL = async_url(url)
        self._busy_timeout_ms = (SQLITE_BUSY_TIMEOUT_MS if sqlite_busy_timeout_s is None
                                 else round(sqlite_busy_timeout_s * 1000))
        self.engine: AsyncEngine = create_engine_for(
            self.url, sqlite_busy_timeout_ms=self._busy_timeout_ms,
            sqlite_merge_on_commit=sqlite_merge_on_commit,
            postgres_pool_size=postgres_pool_size, timeouts=timeouts, **engine_kwargs)
        self.sessionmaker: async_sessionmaker[AsyncSession] = async_sessionmaker(
            self.engine, expire_on_commit=False
        )
        self._sqlite_writer = asyncio.Lock() if self.backend == "sqlite" else None
        self._autocommit = self.engine.execution_options(isolation_level="AUTOCOMMIT")

    @property
    def backend(self) -> str:
        """'sqlite' or 'postgresql': for logs and the one choice of a statement per database
        (app.store.per_database, app.turn.rows) only. A service asks what it needs to know
        (notifies, has_write_ahead_log), never which one runs."""
        return self.url.get_backend_name()

    @property
    def notifies(self) -> bool:
        """The database carries notifications between processes (PostgreSQL's NOTIFY)."""
        return self.backend == "postgresql"

    @property
    def has_write_ahead_log(self) -> bool:
        """The gateway merges the database's write-ahead log itself (SQLite's, with
        sqlite_merge_on_commit=False): merge_sqlite_log must run in the background."""
        return self._sqlite_writer is not None

    @asynccontextmanager
    async def transaction(self, *, quick: bool = False, read_only: bool = False
                          ) -> AsyncIterator[AsyncSession]:
        """A session in one transaction: committed on success, rolled back on any error. The
        way in for everything that is not one of the turn's own hot statements: a use case's
        reads and writes together, a maintenance job, a test's setup.

        `quick`: a few indexed statements, run on every turn (its opening, its finish); on
        SQLite they run on the event loop's thread, which holds the write lock for their CPU
        time only (app.store.sqlite_driver); on PostgreSQL nothing changes.
        `read_only`: a transaction that only reads (a page listing threads, a report). On
        SQLite it neither queues for nor takes the write lock (a deferred BEGIN: WAL readers
        run beside the writer), and only a statement that holds the loop longer than 2 ms
        goes to the connection's thread; on PostgreSQL it is any transaction. A write in it
        is a mistake: on SQLite it would fail as soon as another connection holds the write
        lock. (A read has no `quick`: it never holds the write lock.)

        An error meaning the database cannot be reached or used is raised as
        DatabaseUnavailable (app.store.unavailable says which), whether it came from the
        connection, a statement or the commit. Do not nest transactions of one Database: on
        SQLite the inner one would wait for the outer one and fail after the busy timeout."""
        if quick and read_only:
            raise ValueError("a read-only transaction takes no write lock to be quick with")
        if read_only:
            reading = READING.set(self._sqlite_writer is not None)
            try:
                async with self._errors_named(), self._session() as session:
                    yield session
            finally:
                READING.reset(reading)
            return
        on_loop = ON_LOOP.set(quick and self._sqlite_writer is not None)
        try:
            async with self._errors_named(), self._transaction() as session:
                yield session
        finally:
            ON_LOOP.reset(on_loop)

    @asynccontextmanager
    async def one_statement(self, *, read_only: bool = False) -> AsyncIterator[Runner]:
        """For a block of ONE statement on a turn's way to its first token or its finish,
        whose SQL the store function it calls knows to be one statement (a rate-limit count,
        a memory search).

        On PostgreSQL a pooled connection in autocommit: no BEGIN and no COMMIT (a statement
        is atomic, and reads from one snapshot, on its own; the two round trips saved are two
        more passes of a busy event loop, with the rows it locks held through them), and no
        ORM session, whose set-up and teardown cost a statement's worth of CPU. A second
        write in the block commits on its own: only a caller that knows the store function
        it runs writes once may use it (reads may follow the write).
        On SQLite a quick transaction (`transaction(quick=True)`), or with `read_only` a
        read (`transaction(read_only=True)`): beside the writer, never behind it.
        Errors are named as transaction()'s."""
        if self._sqlite_writer is not None:
            async with self.transaction(quick=not read_only, read_only=read_only) as session:
                yield session
            return
        async with self._errors_named(), self._connection() as connection:
            yield connection

    @asynccontextmanager
    async def sqlite_writes(self, session: AsyncSession | None = None
                            ) -> AsyncIterator[SqliteWrites]:
        """SQLite only, for the writes every turn makes (app.turn.rows.sqlite): statements
        run on the sqlite3 connection itself, without SQLAlchemy's session or execution
        context (app.store.sqlite_writes).

        Without `session`: a quick transaction of its own (as `transaction(quick=True)`),
        committed on success, rolled back on any error; errors named as transaction()'s.
        With `session` (one of transaction()'s): the statements of that session's
        transaction, for a turn's writes that share it with the session's reads or writes;
        its transaction commits or rolls back as it would have."""
        if self._sqlite_writer is None:
            raise RuntimeError("sqlite_writes() is SQLite's")
        if session is not None:
            connection = await session.connection()
            driver = (await connection.get_raw_connection()).driver_connection
            assert isinstance(driver, OneTripConnection)
            yield SqliteWrites(driver.sqlite, self.engine.dialect)
            return
        async with (self._errors_named(), self._sqlite_write_lock(),
                    self._sqlite_driver() as driver):
            with sqlalchemy_errors(WRITE_BEGIN, ()):
                await driver.begin_write()
            try:
                yield SqliteWrites(driver.sqlite, self.engine.dialect)
            except BaseException:
                driver.sqlite.rollback()
                raise
            with sqlalchemy_errors("COMMIT", ()):
                driver.sqlite.commit()

    async def merge_sqlite_log(self) -> tuple[int, int]:
        """SQLite: the write-ahead log copied into the database file, on a pooled connection's
        thread; (frames in the log, frames copied). On PostgreSQL (0, 0).

        The gateway's Database merges no log on commit (sqlite_merge_on_commit=False) and
        calls this every second instead. SQLite's automatic checkpoint runs inside the commit
        that fills the log past a thousand pages, and it syncs the file: a quick transaction
        commits on the event loop, so every few dozen turns one commit held the loop, and
        every stream on it, for the disk's sync (up to 20 ms here), and the turns opening then
        had the slowest first deltas of all.

        The copy waits for nobody (PASSIVE). The log is written from its start again only by
        a commit that begins with all of it copied, which commits arriving faster than the
        copies never do: so after a whole copy the log is restarted if nothing is in the way
        at that moment, and once it holds RESTART_LOG_FRAMES, with this process's writers
        kept out (they wait for the few frames written since the copy and one sync)."""
        if self._sqlite_writer is None:
            return 0, 0
        async with self._errors_named():
            async with self._sqlite_driver() as driver:
                logged, copied = await driver.merge_log()
                if not logged or copied < logged or await driver.restart_log(0):
                    return logged, copied
            if logged >= RESTART_LOG_FRAMES:  # the lock first, as every writer takes it
                async with self._sqlite_write_lock(), self._sqlite_driver() as driver:
                    await driver.restart_log(RESTART_LOG_WAIT_MS)
        return logged, copied

    @asynccontextmanager
    async def _sqlite_driver(self) -> AsyncIterator[OneTripConnection]:
        """A pooled SQLite connection's own, outside SQLAlchemy's transaction handling."""
        connection = await self.engine.connect()
        try:
            driver = (await connection.get_raw_connection()).driver_connection
            assert isinstance(driver, OneTripConnection)
            yield driver
        except BaseException:
            await connection.__aexit__(None, None, None)
            raise
        await connection.close()

    @asynccontextmanager
    async def _errors_named(self) -> AsyncIterator[None]:
        """An error meaning the database cannot be reached or used (at the connection, a
        statement or the commit) raised as DatabaseUnavailable, a pool timeout as
        DatabaseBusy."""
        try:
            yield
        except StoreError:
            raise
        except Exception as exc:
            if is_pool_timeout(exc):
                raise DatabaseBusy(unavailable_sentence(self.url, exc)) from exc
            if is_unavailable(exc):
                raise DatabaseUnavailable(unavailable_sentence(self.url, exc)) from exc
            raise

    @asynccontextmanager
    async def _transaction(self) -> AsyncIterator[AsyncSession]:
        if self._sqlite_writer is None:
            async with self._session() as session:
                yield session
            return
        async with self._sqlite_write_lock(), self._session() as session:
            yield session

    @asynccontextmanager
    async def _sqlite_write_lock(self) -> AsyncIterator[None]:
        """This process's turn at SQLite's write lock (see the module's doc)."""
        assert self._sqlite_writer is not None
        async with asyncio.timeout(self._busy_timeout_ms / 1000):
            await self._sqlite_writer.acquire()
        try:
            yield
        finally:
            self._sqlite_writer.release()

    @asynccontextmanager
    async def _session(self) -> AsyncIterator[AsyncSession]:
        """A session in a transaction, closed. SQLAlchemy's own exit closes it in a task of
        its own, so that a cancellation cannot abandon a close halfway: three passes of the
        event loop, each of which waits for every other stream under load, and on SQLite
        with the write lock held. After a commit the close has nothing to say to the
        database (the pool's reset finds no transaction), so it cannot be abandoned halfway
        and runs here; after an error, a rollback may still be due, and SQLAlchemy's exit
        does it."""
        session = self.sessionmaker()
        try:
            async with session.begin():
                yield session
        except BaseException:
            await session.__aexit__(None, None, None)
            raise
        await session.close()

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[AsyncConnection]:
        """A pooled connection in autocommit, closed as _session closes a session: here
        after success, by SQLAlchemy's own (shielded) exit after an error."""
        connection = await self._autocommit.connect()
        try:
            yield connection
        except BaseException:
            await connection.__aexit__(None, None, None)
            raise
        await connection.close()

    async def dispose(self) -> None:
        """Close every pooled connection (on shutdown, and before dropping a test database)."""
        await self.engine.dispose()
