"""Which database URLs the store runs on, in one place: the setting's validator refuses the
others at start with what is allowed, before any engine is made (SQLAlchemy would fail on a
missing driver module, deep in a traceback, only when it first connects). It lives beside
the settings, outside app.store, because the store's package loads the schema and the
drivers: the settings are checked before any of that is imported."""

from __future__ import annotations

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

#: Driver names an operator may write, and the async driver the store runs on.
ASYNC_DRIVERS = {"postgres": "postgresql+asyncpg", "postgresql": "postgresql+asyncpg",
                 "postgresql+asyncpg": "postgresql+asyncpg", "sqlite": "sqlite+aiosqlite",
                 "sqlite+aiosqlite": "sqlite+aiosqlite"}

SUPPORTED = ("a PostgreSQL or SQLite URL (postgresql+asyncpg://user@host:5432/name or "
             "sqlite+aiosqlite:///path/to/file.db)")

#: What a URL of a supported database with another driver (psycopg2, pysqlite) must be.
_WITH_DRIVER = {
    "postgres": "a PostgreSQL URL with the asyncpg driver (postgresql+asyncpg://...)",
    "postgresql": "a PostgreSQL URL with the asyncpg driver (postgresql+asyncpg://...)",
    "sqlite": "a SQLite URL with the aiosqlite driver (sqlite+aiosqlite:///...)",
}


def async_url(url: str | URL) -> URL:
    """The URL with its async driver: `postgres://` and `postgresql://` (what hosting providers
    hand out as DATABASE_URL) mean asyncpg, `sqlite://` means aiosqlite."""
    parsed = make_url(url)
    driver = ASYNC_DRIVERS.get(parsed.drivername)
    return parsed.set(drivername=driver) if driver else parsed


def one_process_at_a_time(url: str | URL) -> bool:
    """The database is a file that processes share only through its one write lock (SQLite):
    several gateway processes would queue on it, and could not tell each other anything."""
    return make_url(url).get_backend_name() == "sqlite"


def runs_postgres(url: str | URL) -> bool:
    """Whether the URL is PostgreSQL's: what pools, poolers and connection budgets are for
    (the embedded SQLite has none of them)."""
    return make_url(url).get_backend_name() == "postgresql"


def database_url_problem(url: str) -> str | None:
    """What a database URL must be instead, or None when the store can run on it."""
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        return SUPPORTED
    if parsed.drivername in ASYNC_DRIVERS:
        return None
    return _WITH_DRIVER.get(parsed.drivername.split("+", 1)[0], SUPPORTED)


def redacted(url: str | URL) -> str:
    """The URL as logs and error sentences show it: its password hidden."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except (ArgumentError, ValueError):
        return str(url)
