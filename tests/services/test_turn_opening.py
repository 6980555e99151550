"""A turn's opening, both ways (one statement on PostgreSQL, a transaction otherwise), on both
backends: the same rows and history whichever way it went, and nothing stored when a check
refuses."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from sqlalchemy.ext.asyncio import AsyncSession

from app.main import build_runtime
from app.records import FinishedMessage
from app.services.runtime import Runtime
from app.services.turn_opening import open_rows
from app.settings import Settings
from app.store import messages as message_store
from app.store.db import Database
from app.store.models import Thread
from tests.store.factories import new_thread, turn
from tests.support.locks import until_a_lock_is_awaited
from tests.support.statements import statements_in_transaction


class Refused(Exception):
    pass


class Admission:
    """A TurnAdmission that notes each call, and refuses while `refusing`."""

    def __init__(self, *, cap: int, cap_is_all: bool = True, refusing: bool = False) -> None:
        self.counts_streams, self.cap_is_all = True, cap_is_all
        self.cap, self.refusing = cap, refusing
        self.calls: list[int | None] = []

    def stream_cap(self) -> int:
        return self.cap

    def check_count(self, other_streams: int) -> None:
        self.calls.append(other_streams)
        if self.refusing:
            raise Refused

    async def __call__(self, session: AsyncSession, other_streams: int | None = None
                       ) -> None:
        self.calls.append(other_streams)
        if self.refusing:
            raise Refused


_DONE = [("complete", "one"), ("complete", "reply one")]
STREAMING = ("streaming", "")


@pytest.fixture
async def runtime(database_url: str) -> AsyncIterator[Runtime]:
    rt = build_runtime(Settings(database_url=database_url,
                                upstream_base_url="http://127.0.0.1:9/v1"))
    yield rt
    await rt.http.aclose()
    await rt.db.dispose()


async def _contents(db: Database, thread: Thread) -> list[tuple[str, str]]:
    """The thread as its user sees it: (status, content), the turn's answer still streaming."""
    async with db.read() as s:
        return [(m.status, m.content) for m in await message_store.visible_history(
            s, thread.user_id, thread.id)]


async def test_an_opening_behind_a_finish_waits_and_sees_its_answer(runtime: Runtime) -> None:
    """The finish holds the thread's row when the opening starts. On PostgreSQL the one
    statement's snapshot predates that answer: it stores nothing, and the opening runs again
    in a transaction, whose history holds the answer."""
    db = runtime.db
    if db.backend == "sqlite":
        pytest.skip("SQLite serialises write transactions; row locks are PostgreSQL's")
    thread = await new_thread(db, "svc")
    _, first = await open_rows(runtime.turn_deps, "svc", thread.id, "one")
    with statements_in_transaction(db) as statements:
        async with db.transaction() as finish:
            await message_store.finish_assistant_message(
                finish, FinishedMessage(first.assistant.id, "reply one", {}, "complete", []))
            opening = asyncio.create_task(open_rows(runtime.turn_deps, "svc", thread.id, "two"))
            await until_a_lock_is_awaited(db)
        _, second = await opening
    assert [text for _, text, _ in second.history] == ["one", "reply one"]
    # the one statement, outside a transaction; then open_for_turn and open_exchange in one
    assert statements[statements.index(("WITH", False)) + 1:] == [("WITH", True)] * 2
    assert await _contents(db, thread) == [*_DONE, ("complete", "two"), STREAMING]


async def test_the_same_rows_and_history_either_way(runtime: Runtime) -> None:
    """A key with a budget (an admission that reads more than the stream count) opens in a
    session's transaction; one without, in one statement on PostgreSQL and in the sqlite3
    connection's statements on SQLite, which count the streams under the cap."""
    db = runtime.db
    opened = []
    for cap_is_all in (True, False):
        thread = await new_thread(db, "svc")
        await turn(db, thread, "one", "reply one")
        admission = Admission(cap=5, cap_is_all=cap_is_all)
        opened.append(await open_rows(runtime.turn_deps, "svc", thread.id, "two",
                                      admit=admission))
        if cap_is_all:  # the opening counted, under the cap: nothing to ask
            assert admission.calls == []
        elif db.backend == "sqlite":
            assert admission.calls == [None]  # the transaction's admission counts on its own
        else:  # the transaction's admission was asked, and counted the first thread's
            # answer, still streaming
            assert admission.calls == [1]
        assert await _contents(db, thread) == [*_DONE, ("complete", "two"), STREAMING]
    histories = [[text for _, text, _ in exchange.history] for _, exchange in opened]
    assert histories == [["one", "reply one"]] * 2
    for thread, exchange in opened:
        assert exchange.user.created_at < exchange.assistant.created_at
        assert thread.user_id == "svc"


async def test_a_refusal_at_the_cap_stores_nothing(runtime: Runtime) -> None:
    db = runtime.db
    busy = await new_thread(db, "svc")
    await open_rows(runtime.turn_deps, "svc", busy.id, "streaming")
    thread = await new_thread(db, "svc")
    admission = Admission(cap=1, refusing=True)
    with pytest.raises(Refused):
        await open_rows(runtime.turn_deps, "svc", thread.id, "two", admit=admission)
    assert admission.calls == [1]  # the opening's count: the other thread's answer
    assert await _contents(db, thread) == []


async def test_a_cap_that_no_longer_holds_is_checked_again_in_a_transaction(
        runtime: Runtime) -> None:
    """The statement was given a cap that stopped holding meanwhile (a call without a thread
    ended): the admission, asked, lets the turn pass, and the transaction opens it. On
    SQLite the opening is that transaction: asked once, before its commit."""
    db = runtime.db
    busy = await new_thread(db, "svc")
    await open_rows(runtime.turn_deps, "svc", busy.id, "streaming")
    thread = await new_thread(db, "svc")
    admission = Admission(cap=1)
    _, exchange = await open_rows(runtime.turn_deps, "svc", thread.id, "two", admit=admission)
    # PostgreSQL: asked after the statement, then in the transaction
    assert admission.calls == ([1, 1] if db.backend == "postgresql" else [1])
    assert exchange.other_streams == 1
    assert await _contents(db, thread) == [("complete", "two"), STREAMING]
