"""app.process.readiness: ready, not migrated, unreachable, on real databases; never raises."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from app.process.readiness import not_ready_reason
from app.store.db import Database
from tests.support.databases import drop_database, make_fresh_database_url


@pytest.fixture
def unmigrated_url(backend: str) -> Iterator[str]:
    url = make_fresh_database_url(backend, migrated=False)
    yield url
    drop_database(url)


async def test_a_migrated_database_is_ready(db: Database) -> None:
    assert await not_ready_reason(db) is None


async def test_a_database_never_migrated_is_not(unmigrated_url: str) -> None:
    db = Database(unmigrated_url)
    try:
        assert await not_ready_reason(db) == "database_not_migrated"
    finally:
        await db.dispose()


async def test_a_database_that_does_not_answer_is_a_reason_not_an_error() -> None:
    db = Database("postgresql+asyncpg://postgres@127.0.0.1:1/nowhere")
    try:
        assert await not_ready_reason(db) == "database_unreachable"
    finally:
        await db.dispose()
