"""Whether an error means "the database cannot be reached" (down, refusing, a wrong path or
host, a database that does not exist), as opposed to a bug: entry points say the first in one
sentence and keep tracebacks for the second."""

from __future__ import annotations

import asyncpg
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import URL, make_url

#: The network's errors, and asyncpg's of a server that is there but will not serve us.
_UNREACHABLE: tuple[type[BaseException], ...] = (
    OSError,  # refused, no such host, a socket that died (ConnectionError is one)
    TimeoutError,
    asyncpg.exceptions.InvalidCatalogNameError,  # the database does not exist
    asyncpg.exceptions.CannotConnectNowError,  # starting up or shutting down
    asyncpg.exceptions.ConnectionDoesNotExistError,
    asyncpg.exceptions.InvalidAuthorizationSpecificationError,
    asyncpg.exceptions.TooManyConnectionsError,
)


def root_cause(error: BaseException) -> BaseException:
    """The driver's own error under SQLAlchemy's and asyncio's wrappers."""
    seen: set[int] = set()
    while id(error) not in seen:
        seen.add(id(error))
        inner = getattr(error, "orig", None) or error.__cause__
        if not isinstance(inner, BaseException):
            break
        error = inner
    return error


def is_unreachable(error: BaseException) -> bool:
    if isinstance(error, sa_exc.DBAPIError) and error.connection_invalidated:
        return True
    cause = root_cause(error)
    if isinstance(cause, _UNREACHABLE):
        return True
    # SQLite: a path whose folder is missing or not writable ("unable to open database file").
    return isinstance(error, sa_exc.OperationalError) and "unable to open" in str(cause)


def unreachable_sentence(url: str | URL, error: BaseException) -> str:
    """`cannot reach the database sqlite:///nope/x.db: unable to open database file`."""
    where = make_url(url).render_as_string(hide_password=True)
    reason = (str(root_cause(error)).strip().splitlines() or [type(error).__name__])[0]
    return f"cannot reach the database {where}: {reason[:200]}"
