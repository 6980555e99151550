"""Database fixtures for SQLite and PostgreSQL, shared by every test directory.

Fixtures
    backend       "sqlite" | "postgresql" (parametrised: a test using it runs on both)
    database_url  a fresh, isolated database for that backend, migrated to alembic head
    db            an open app.store.Database on database_url, disposed after the test

Plain functions (for tests that start their own gateways, or need an unmigrated database)
    make_fresh_database_url(backend, migrated=True) -> url
    drop_database(url)

Marks
    postgres_only(why)   the test runs on PostgreSQL alone (no SQLite variant is collected)

Isolation: every test gets a database of its own, empty and at alembic head.
SQLite: a copy of a template file migrated once per session.
PostgreSQL: `CREATE DATABASE cg_test_<hex> TEMPLATE cg_tmpl_<hex>` from a template migrated once
per session. CREATE DATABASE costs 60-300 ms depending on server load, so a database a test is
done with is recycled: if no connection is left on it and its schema fingerprint (relations,
columns, constraints, triggers, functions, alembic version) still equals the template's, its
tables are TRUNCATEd and it goes back to a per-process pool; otherwise (a test changed the
schema or leaked a connection) it is dropped. Every database created is dropped at session end;
nothing else on the server is touched.

PostgreSQL comes from CHATGATE_TEST_POSTGRES_URL (default postgresql://postgres@127.0.0.1:5432/
test, the admin connection used to create and drop databases). When it cannot be reached (no
answer, connection refused, timeout, server starting or stopping) the PostgreSQL tests are
skipped loudly (a warning, and the red block of skips.py in the terminal summary), unless
CHATGATE_REQUIRE_POSTGRES=1 (CI), where they fail instead. A server that answers but refuses
the connection (wrong password, missing database or role, pg_hba rejection, ...) is
misconfigured, not absent: the PostgreSQL tests fail with its error.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import threading
import uuid
import warnings
from collections.abc import AsyncIterator, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import asyncpg
import pytest
from sqlalchemy.engine import make_url

from app.store.db import Database
from app.store.migrations import upgrade_to_head

BACKENDS = ("sqlite", "postgresql")
PG_ADMIN_URL = os.environ.get(
    "CHATGATE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)
T = TypeVar("T")


def _run(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion from sync code, even inside a running event loop
    (a fresh loop in a short-lived thread)."""
    result: list[T] = []
    error: list[BaseException] = []

    def target() -> None:
        try:
            result.append(asyncio.run(coro))
        except BaseException as exc:
            error.append(exc)

    thread = threading.Thread(target=target, name="cg-db-fixture")
    thread.start()
    thread.join()
    if error:
        raise error[0]
    return result[0]


class _State:
    """Per-process bookkeeping: reachability, templates, what we created, what we skipped."""

    pg_checked = False
    pg_error: str | None = None  # why the server cannot be reached: skip
    pg_refused: str | None = None  # the server answered with an error: fail
    pg_skipped = 0
    lock = threading.Lock()
    sqlite_template: Path | None = None
    pg_template: str | None = None
    tmp_root: Path | None = None
    pg_template_fingerprint: str | None = None
    created_pg: set[str] = set()  # noqa: RUF012 - process-wide registry on purpose
    pg_pool: list[str] = []  # noqa: RUF012 - clean, migrated databases ready for reuse


def _pg_url_for(database: str) -> str:
    """The SQLAlchemy (asyncpg) URL of a database on the admin server."""
    admin = make_url(PG_ADMIN_URL)
    return admin.set(drivername="postgresql+asyncpg", database=database).render_as_string(
        hide_password=False
    )


def _admin_dsn() -> str:
    return make_url(PG_ADMIN_URL).set(drivername="postgresql").render_as_string(
        hide_password=False
    )


# Everything a test could change about a database's schema, hashed.
SCHEMA_FINGERPRINT_SQL = """
SELECT md5(coalesce(string_agg(item, ',' ORDER BY item), '')) FROM (
  SELECT 'rel:' || n.nspname || '.' || c.relname || ':' || c.relkind::text AS item
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
   WHERE n.nspname NOT IN ('pg_catalog', 'information_schema')
     AND n.nspname NOT LIKE 'pg_toast%' AND n.nspname NOT LIKE 'pg_temp%'
  UNION ALL
  SELECT 'col:' || c.relname || '.' || a.attname || ':' || format_type(a.atttypid, a.atttypmod)
         || ':' || a.attnotnull::text || ':' || a.attgenerated::text
    FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
    JOIN pg_namespace n ON n.oid = c.relnamespace
   WHERE n.nspname = 'public' AND a.attnum > 0 AND NOT a.attisdropped
  UNION ALL
  SELECT 'con:' || conname || ':' || pg_get_constraintdef(c.oid)
    FROM pg_constraint c JOIN pg_namespace n ON n.oid = c.connamespace
   WHERE n.nspname = 'public'
  UNION ALL
  SELECT 'idx:' || indexrelid::regclass || ':' || pg_get_indexdef(indexrelid) FROM pg_index i
    JOIN pg_class c ON c.oid = i.indrelid JOIN pg_namespace n ON n.oid = c.relnamespace
   WHERE n.nspname = 'public'
  UNION ALL
  SELECT 'trg:' || tgname FROM pg_trigger WHERE NOT tgisinternal
  UNION ALL
  SELECT 'fn:' || p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
   WHERE n.nspname NOT IN ('pg_catalog', 'information_schema')
  UNION ALL
  SELECT 'ver:' || version_num FROM alembic_version
) items
"""
TABLES_SQL = (
    "SELECT tablename FROM pg_tables WHERE schemaname = 'public' "
    "AND tablename <> 'alembic_version' ORDER BY tablename"
)


async def _fingerprint(name: str) -> str:
    connection = await asyncpg.connect(_pg_dsn(name), timeout=5)
    try:
        return str(await connection.fetchval(SCHEMA_FINGERPRINT_SQL))
    finally:
        await connection.close()


async def _reset_for_reuse(name: str, expected_fingerprint: str) -> bool:
    """Empty the database for the next test; False when it must be dropped instead."""
    admin = await asyncpg.connect(_admin_dsn(), timeout=5)
    try:
        others = await admin.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = $1", name)
    finally:
        await admin.close()
    if others:
        return False  # a leaked connection could still write into the next test's data
    connection = await asyncpg.connect(_pg_dsn(name), timeout=5)
    try:
        await connection.execute("SET lock_timeout = '2s'")
        if await connection.fetchval(SCHEMA_FINGERPRINT_SQL) != expected_fingerprint:
            return False
        tables = [row[0] for row in await connection.fetch(TABLES_SQL)]
        if tables:
            quoted = ", ".join(f'"{table}"' for table in tables)
            await connection.execute(f"TRUNCATE {quoted} RESTART IDENTITY CASCADE")
        return True
    except (asyncpg.PostgresError, OSError):
        return False
    finally:
        await connection.close()


def _pg_dsn(database: str) -> str:
    return make_url(PG_ADMIN_URL).set(drivername="postgresql", database=database).render_as_string(
        hide_password=False
    )


async def _admin_execute(*statements: str) -> None:
    connection = await asyncpg.connect(_admin_dsn(), timeout=5)
    try:
        for statement in statements:
            await connection.execute(statement)
    finally:
        await connection.close()


async def set_connections_allowed(url: str, allowed: bool) -> None:
    """A PostgreSQL outage for one test database: refuse new connections and end the open
    ones (allowed=False), or let connections in again."""
    name = make_url(url).database or ""
    flag = "true" if allowed else "false"
    statements = [f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS {flag}']
    if not allowed:
        statements.append("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                          f"WHERE datname = '{name}' AND pid <> pg_backend_pid()")
    await _admin_execute(*statements)


UNREACHABLE: tuple[type[BaseException], ...] = (
    OSError,  # refused, unreachable host, unknown name, reset during the handshake
    asyncio.TimeoutError,  # asyncpg's connect timeout
    asyncpg.CannotConnectNowError,  # starting up or shutting down
)
"""Errors that mean no PostgreSQL server can be reached. Any other error on the first
connection comes from a server that is there but refuses us."""


def _shown_admin_url() -> str:
    return make_url(PG_ADMIN_URL).render_as_string(hide_password=True)


def postgres_unavailable_reason() -> str | None:
    """None when PostgreSQL answers, why not when it cannot be reached (checked once per
    process). When the server answers with an error instead (wrong password, missing database,
    role refused, ...) this fails the calling test with that error."""
    with _State.lock:
        if not _State.pg_checked:
            try:
                _run(_admin_execute("SELECT 1"))
            except UNREACHABLE as exc:
                _State.pg_error = f"{type(exc).__name__}: {exc}"
            except Exception as exc:
                _State.pg_refused = f"{type(exc).__name__}: {exc}"
            _State.pg_checked = True
        refused, unreachable = _State.pg_refused, _State.pg_error
    if refused is not None:
        pytest.fail(
            f"PostgreSQL at {_shown_admin_url()} answers but refuses the test connection "
            f"({refused}): fix the server or CHATGATE_TEST_POSTGRES_URL",
            pytrace=False,
        )
    return unreachable


def require_postgres() -> None:
    """Skip (loudly) or, with CHATGATE_REQUIRE_POSTGRES=1, fail when PostgreSQL is unreachable;
    fail when it is there but refuses the connection."""
    reason = postgres_unavailable_reason()
    if reason is None:
        return
    message = f"PostgreSQL at {_shown_admin_url()} unreachable ({reason})"
    if os.environ.get("CHATGATE_REQUIRE_POSTGRES") == "1":
        pytest.fail(f"{message} and CHATGATE_REQUIRE_POSTGRES=1", pytrace=False)
    _State.pg_skipped += 1
    if _State.pg_skipped == 1:
        warnings.warn(f"{message}: PostgreSQL tests are SKIPPED", stacklevel=2)
    pytest.skip(f"{message}: PostgreSQL test skipped")


def _tmp_root() -> Path:
    if _State.tmp_root is None:
        _State.tmp_root = Path(tempfile.mkdtemp(prefix="cg_test_"))
    return _State.tmp_root


def _sqlite_url(path: Path) -> str:
    return f"sqlite+aiosqlite:///{path}"


def _sqlite_template() -> Path:
    with _State.lock:
        if _State.sqlite_template is None:
            path = _tmp_root() / "template.db"
            _run(upgrade_to_head(_sqlite_url(path)))
            _State.sqlite_template = path
        return _State.sqlite_template


def _pg_template() -> str:
    with _State.lock:
        if _State.pg_template is None:
            name = f"cg_tmpl_{uuid.uuid4().hex[:12]}"
            _run(_admin_execute(f'CREATE DATABASE "{name}"'))
            _State.created_pg.add(name)
            try:
                _run(upgrade_to_head(_pg_url_for(name)))
                _State.pg_template_fingerprint = _run(_fingerprint(name))
            except BaseException:
                _run(_admin_execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
                _State.created_pg.discard(name)
                raise
            _State.pg_template = name
        return _State.pg_template


def make_fresh_database_url(backend: str, *, migrated: bool = True) -> str:
    """A new database of its own for one test (migrated to head unless migrated=False).
    Drop it with drop_database(url)."""
    if backend == "sqlite":
        path = _tmp_root() / f"cg_test_{uuid.uuid4().hex[:12]}.db"
        if migrated:
            shutil.copyfile(_sqlite_template(), path)
        return _sqlite_url(path)
    if backend == "postgresql":
        require_postgres()
        if migrated:
            with _State.lock:
                if _State.pg_pool:
                    return _pg_url_for(_State.pg_pool.pop())
        name = f"cg_test_{uuid.uuid4().hex[:12]}"
        template = f' TEMPLATE "{_pg_template()}"' if migrated else ""
        _run(_admin_execute(f'CREATE DATABASE "{name}"{template}'))
        _State.created_pg.add(name)
        return _pg_url_for(name)
    raise ValueError(f"unknown backend {backend!r}; expected one of {BACKENDS}")


def drop_database(url: str) -> None:
    """Done with a database made by make_fresh_database_url: a PostgreSQL database still clean
    of schema changes and connections is emptied and pooled for reuse, any other is dropped
    (open connections ended). SQLite files are deleted."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        path = Path(parsed.database or "")
        for suffix in ("", "-wal", "-shm", "-journal"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        return
    name = parsed.database or ""
    if name not in _State.created_pg:
        raise ValueError(f"refusing to drop {name!r}: not created by these fixtures")
    expected = _State.pg_template_fingerprint
    if expected is not None and _run(_reset_for_reuse(name, expected)):
        with _State.lock:
            _State.pg_pool.append(name)
        return
    _run(_admin_execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    _State.created_pg.discard(name)


#: The parameters of a fixture that runs its tests on each backend.
BACKEND_PARAMS = [pytest.param("sqlite"), pytest.param("postgresql", marks=pytest.mark.postgres)]


def postgres_only(why: str) -> pytest.MarkDecorator:
    """Mark a test of what PostgreSQL alone has (row locks, round trips, query plans): it runs
    on PostgreSQL only, and no SQLite variant is collected to skip on every machine. `why`
    says why SQLite has nothing to show (it is for the reader; the mark does not use it)."""
    del why
    return pytest.mark.parametrize("backend", [BACKEND_PARAMS[1]], indirect=True)


def backend_param(request: pytest.FixtureRequest) -> str:
    """The backend a BACKEND_PARAMS fixture was given, once it is known to be reachable."""
    name: str = request.param
    if name == "postgresql":
        require_postgres()
    return name


@pytest.fixture(params=BACKEND_PARAMS)
def backend(request: pytest.FixtureRequest) -> str:
    """The database backend under test; every test using it runs on both."""
    return backend_param(request)


@pytest.fixture
def database_url(backend: str) -> Iterator[str]:
    """A fresh database migrated to head, dropped after the test."""
    url = make_fresh_database_url(backend)
    yield url
    drop_database(url)


@pytest.fixture
async def db(database_url: str) -> AsyncIterator[Database]:
    """An open Database on a fresh migrated database."""
    database = Database(database_url)
    yield database
    await database.dispose()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Drop what this process created (the templates and any database a test leaked)."""
    for name in sorted(_State.created_pg):
        try:
            _run(_admin_execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        except Exception as exc:  # the server may be gone; say so rather than hide it
            warnings.warn(f"could not drop test database {name}: {exc}", stacklevel=1)
    _State.created_pg.clear()
    _State.pg_pool.clear()
    _State.pg_template_fingerprint = None
    if _State.tmp_root is not None:
        shutil.rmtree(_State.tmp_root, ignore_errors=True)
        _State.tmp_root = None
        _State.sqlite_template = None
    _State.pg_template = None


def metadata_key_dropping_trigger(backend: str, key: str) -> list[str]:
    """DDL for a database that silently drops `key` from a message's metadata on insert (what a
    legacy trigger or a lossy serialiser would do), to prove the integrity check notices."""
    name = f"drop_{key}"
    if backend == "sqlite":
        return [f"""CREATE TRIGGER {name} AFTER INSERT ON messages BEGIN
                    UPDATE messages SET metadata = json_remove(metadata, '$.{key}')
                    WHERE id = NEW.id; END"""]
    return [
        f"""CREATE FUNCTION {name}() RETURNS trigger AS $$
            BEGIN NEW.metadata := NEW.metadata - '{key}'; RETURN NEW; END $$
            LANGUAGE plpgsql""",
        f"""CREATE TRIGGER {name} BEFORE INSERT ON messages
            FOR EACH ROW EXECUTE FUNCTION {name}()""",
    ]
