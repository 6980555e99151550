"""Which driver and SQLAlchemy errors mean "the database is not there right now", in one
place: the store raises DatabaseUnavailable for them, so no caller needs to know asyncpg's or
sqlite3's error zoo, and a real bug (an IntegrityError, a bad query) stays a 500."""

from __future__ import annotations

from collections.abc import Iterator

import asyncpg
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import URL, make_url

#: asyncpg's own errors for a connection that cannot be made or was lost.
_ASYNCPG_UNAVAILABLE: tuple[type[BaseException], ...] = (
    asyncpg.PostgresConnectionError,  # SQLSTATE class 08
    asyncpg.CannotConnectNowError,  # 57P03: starting up, shutting down
    asyncpg.ConnectionDoesNotExistError,
    asyncpg.InterfaceError,  # connection closed / in a failed state
    asyncpg.TooManyConnectionsError,
    asyncpg.AdminShutdownError,
    asyncpg.CrashShutdownError,
    # 57014: the server cancelled the statement (a statement_timeout or lock wait the
    # operator set on the role, or the cancel asyncpg sends when its command_timeout ran out)
    asyncpg.QueryCanceledError,
)
#: SQLAlchemy's wrappers that, whatever the backend, mean the connection is unusable:
#: OperationalError covers SQLite's "database is locked", "unable to open database file" and
#: "disk I/O error"; TimeoutError is the pool's checkout timeout.
_SA_UNAVAILABLE: tuple[type[BaseException], ...] = (
    sa_exc.OperationalError, sa_exc.InterfaceError, sa_exc.DisconnectionError,
    sa_exc.TimeoutError,
)
#: Refused, reset, unreachable (OSError, ConnectionError), and every bound of the store's
#: running out (app.store.db.DatabaseTimeouts): asyncpg's connect and statement timeouts and
#: asyncio's are all TimeoutError, which SQLAlchemy passes on unwrapped.
_OS_UNAVAILABLE: tuple[type[BaseException], ...] = (OSError, TimeoutError)


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        orig = getattr(current, "orig", None)
        current = orig if isinstance(orig, BaseException) else (
            current.__cause__ or current.__context__)


def _not_accepting_connections(exc: BaseException) -> bool:
    """55000 "database ... is not currently accepting connections" (ALLOW_CONNECTIONS off
    for maintenance): a connect-time refusal, whatever its SQLSTATE class."""
    return (isinstance(exc, asyncpg.ObjectNotInPrerequisiteStateError)
            and "accepting connections" in str(exc))


def is_unavailable(exc: BaseException) -> bool:
    """Whether `exc` (or what it wraps) says the database cannot be reached or used now."""
    for error in _chain(exc):
        if isinstance(error, sa_exc.DBAPIError) and error.connection_invalidated:
            return True
        if isinstance(error, _SA_UNAVAILABLE + _ASYNCPG_UNAVAILABLE + _OS_UNAVAILABLE):
            return True
        if _not_accepting_connections(error):
            return True
    return False


def is_pool_timeout(exc: BaseException) -> bool:
    """Whether `exc` is the pool's checkout timeout (no free connection in time)."""
    return any(isinstance(error, sa_exc.TimeoutError) for error in _chain(exc))


def unavailable_sentence(url: str | URL, exc: BaseException) -> str:
    """What an operator reads when an entry point cannot reach its database, in one line:
    `cannot reach the database postgresql+asyncpg://...: [Errno 111] Connect call failed`."""
    where = make_url(url).render_as_string(hide_password=True)
    cause = list(_chain(exc))[-1]
    reason = (str(cause).strip().splitlines() or [type(cause).__name__])[0]
    return f"cannot reach the database {where}: {reason[:200]}"


def missing_database_sentence(url: str | URL, exc: BaseException) -> str | None:
    """The operator's next step when the PostgreSQL server answers but has no database of
    that name (SQLSTATE 3D000), or None for any other error. SQLite creates its file."""
    if not any(isinstance(error, asyncpg.InvalidCatalogNameError) for error in _chain(exc)):
        return None
    parsed = make_url(url)
    where = parsed.render_as_string(hide_password=True)
    options = [f"-h {parsed.host}" if parsed.host else "",
               f"-p {parsed.port}" if parsed.port else "",
               f"-U {parsed.username}" if parsed.username else ""]
    command = " ".join([o for o in ["createdb", *options] if o] + [parsed.database or ""])
    return (f"the database {where} does not exist: create it with `{command}`; "
            "scripts/serve then creates its tables")
