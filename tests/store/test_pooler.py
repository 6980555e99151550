"""The store behind PgBouncer in transaction mode: statements in autocommit and in
transactions, many at once over fewer server connections, none failing on a prepared
statement another server connection holds, or lacks."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from sqlalchemy import text

from app.store.db import Database
from tests.support.databases import drop_database, make_fresh_database_url
from tests.support.pgbouncer import PgBouncer, running_pgbouncer

pytestmark = pytest.mark.postgres

CLIENTS, ROUNDS = 40, 10


@pytest.fixture(scope="module")
def bouncer() -> Iterator[PgBouncer]:
    with running_pgbouncer() as running:
        yield running


@pytest.fixture
def bounced_url(bouncer: PgBouncer) -> Iterator[str]:
    url = make_fresh_database_url("postgresql")
    yield bouncer.url_of(url)
    drop_database(url)


async def _failures(db: Database) -> list[str]:
    """Each client's rounds of one autocommit statement and one two-statement transaction;
    the errors met."""
    failures: list[str] = []

    async def client(k: int) -> None:
        for n in range(ROUNDS):
            try:
                async with db.one_statement() as runner:
                    await runner.execute(text("SELECT CAST(:n AS int) + 1"), {"n": n})
                async with db.transaction() as session:
                    await session.execute(text("SELECT CAST(:k AS int) * 2"), {"k": k})
                    await session.execute(text("SELECT pg_sleep(0.001), CAST(:n AS int)"),
                                          {"n": n})
            except Exception as error:
                failures.append(str(error)[:200])

    await asyncio.gather(*(client(k) for k in range(CLIENTS)))
    return failures


async def test_through_a_transaction_pooler_no_statement_fails(bounced_url: str) -> None:
    db = Database(bounced_url, postgres_pool_size=CLIENTS, transaction_pooler=True)
    try:
        assert await _failures(db) == []
    finally:
        await db.dispose()


async def test_named_statements_through_it_do_fail(bounced_url: str) -> None:
    """What the setting prevents: asyncpg's own names, cached, meet each other."""
    db = Database(bounced_url, postgres_pool_size=CLIENTS)
    try:
        failures = await _failures(db)
    finally:
        await db.dispose()
    assert any("prepared statement" in failure for failure in failures), failures[:3]
