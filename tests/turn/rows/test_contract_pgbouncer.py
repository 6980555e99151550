"""The turn repository's contract through PgBouncer in transaction mode: every test of
test_contract.py again, on PostgreSQL behind a PgBouncer of the tests' own, with the store
set for it (`transaction_pooler`: no statement kept on the server). The events bus's NOTIFY
goes through the pooler and reaches a listener on a direct connection, as the gateway listens
without Redis (CHATGATE_DATABASE_LISTEN_URL)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import pytest

from app.answer.records import FinishedMessage
from app.events.bus import PostgresMessageBus
from app.events.notices import MessageNotice
from app.store.db import Database
from app.turn.rows import turn_rows
from tests.store.factories import call, new_thread, open_rows
from tests.support.databases import drop_database, make_fresh_database_url
from tests.support.pgbouncer import PgBouncer, running_pgbouncer
from tests.turn.rows import test_contract
from tests.turn.rows.test_contract import *  # noqa: F403 (the contract, run again here)

pytestmark = pytest.mark.postgres

CONTRACT = [name for name in dir(test_contract) if name.startswith("test_")]


@pytest.fixture(scope="module")
def bouncer() -> Iterator[PgBouncer]:
    with running_pgbouncer() as running:
        yield running


@pytest.fixture
def backend() -> str:
    """PostgreSQL alone (a contract test marked postgres_only asks for it by name)."""
    return "postgresql"


@pytest.fixture
def direct_url(backend: str, bouncer: PgBouncer) -> Iterator[str]:
    url = make_fresh_database_url(backend)
    yield url
    bouncer.release(url)
    drop_database(url)


@pytest.fixture
async def db(bouncer: PgBouncer, direct_url: str) -> AsyncIterator[Database]:
    database = Database(bouncer.url_of(direct_url), transaction_pooler=True)
    yield database
    await database.dispose()


def test_the_whole_contract_runs_here() -> None:
    here = {name for name in globals() if name.startswith("test_")}
    assert set(CONTRACT) - here == set()


async def test_a_notice_through_the_pooler_reaches_a_direct_listener(
        db: Database, direct_url: str) -> None:
    """The bus sends its NOTIFY through the pooler once a finish committed; its LISTEN is on
    the direct connection."""
    thread = await new_thread(db)
    opened = await open_rows(db, thread, "one")
    await turn_rows(db).finish(
        FinishedMessage(opened.assistant.id, "reply", {}, "complete", [call()]))
    bus = PostgresMessageBus(db, listen_db=Database(direct_url))
    await bus.start()
    try:
        with bus.subscribe(thread.id) as notices:
            bus.announce_after_commit(MessageNotice(thread.id, (opened.assistant.id,)))
            notice = await asyncio.wait_for(notices.get(), 10)
    finally:
        await bus.stop()
    assert notice.message_ids == (opened.assistant.id,)
