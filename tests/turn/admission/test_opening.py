"""A turn's opening as the turn shell asks for it (app.turn.admission.opening), on both
backends: the rows and history it stores, the retry behind a finish, and nothing stored when
a limit refuses."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import AsyncIterator
from typing import NoReturn

import pytest
from sqlalchemy.ext.asyncio import AsyncSession

from app.answer.records import FinishedMessage
from app.config.settings import Settings
from app.gateway.runtime import Runtime
from app.store.db import Database
from app.store.models import Thread
from app.threads import repository as threads_store
from app.turn.admission.opening import open_rows, opening_request
from app.turn.rows import DayBudget, FinishedRow, Opened, Refused
from tests.store.factories import new_thread, turn
from tests.support.databases import postgres_only
from tests.support.locks import until_a_lock_is_awaited
from tests.support.runtimes import runtime_of
from tests.support.statements import statements_in_transaction


class Refusal(Exception):
    pass


class Admission:
    """A TurnAdmission with a cap and a budget, that notes what each refusal was given."""

    def __init__(self, *, cap: int | None, budget: DayBudget | None = None) -> None:
        self.cap, self._budget = cap, budget
        self.refused: list[Refused] = []

    def stream_cap(self) -> int | None:
        return self.cap

    def budget(self) -> DayBudget | None:
        return self._budget

    def refuse(self, refused: Refused) -> NoReturn:
        self.refused.append(refused)
        raise Refusal


_DONE = [("complete", "one"), ("complete", "reply one")]
STREAMING = ("streaming", "")


@pytest.fixture
async def runtime(database_url: str) -> AsyncIterator[Runtime]:
    async with runtime_of(Settings(database_url=database_url,
                                   upstream_base_url="http://127.0.0.1:9/v1")) as rt:
        yield rt


async def _contents(db: Database, thread: Thread) -> list[tuple[str, str]]:
    """The thread as its user sees it: (status, content), the turn's answer still streaming."""
    async with db.transaction(read_only=True) as s:
        return [(m.status, m.content) for m in await threads_store.visible_history(
            s, thread.user_id, thread.id)]


async def _open(runtime: Runtime, thread: Thread, content: str,
                admit: Admission | None = None) -> Opened:
    deps = runtime.turn_deps
    return await open_rows(deps, opening_request(deps, "svc", thread.id, content, admit=admit),
                           admit=admit)


@postgres_only("SQLite serialises write transactions; row locks are PostgreSQL's")
async def test_an_opening_behind_a_finish_waits_and_sees_its_answer(runtime: Runtime) -> None:
    """The finish holds the thread's row when the opening starts. On PostgreSQL the one
    statement's snapshot predates that answer: it stores nothing, and the opening runs again
    in a transaction that locks the thread first, whose history holds the answer."""
    db = runtime.db
    thread = await new_thread(db, "svc")
    first = await _open(runtime, thread, "one")
    opening: list[asyncio.Task[Opened]] = []

    async def hold(session: AsyncSession, row: FinishedRow) -> None:
        opening.append(asyncio.create_task(_open(runtime, thread, "two")))
        await until_a_lock_is_awaited(db)

    with statements_in_transaction(db) as statements:
        await runtime.turn_deps.rows.finish(
            FinishedMessage(first.assistant.id, "reply one", {}, "complete", []), hook=hold)
        second = await opening[0]
    assert [text for _, text, _ in second.history] == ["one", "reply one"]
    # the one statement, outside a transaction; then the thread's lock and the statement in one
    assert statements[statements.index(("WITH", False)) + 1:] == [("SELECT", True),
                                                                  ("WITH", True)]
    assert await _contents(db, thread) == [*_DONE, ("complete", "two"), STREAMING]


async def test_the_same_rows_and_history_with_a_budget_or_without(runtime: Runtime) -> None:
    """A key with a budget and one without open through the same opening, which reads the
    day's usage only for the first: the same rows and history, nothing refused."""
    db = runtime.db
    opened = []
    today = dt.datetime.now(dt.UTC).date()
    for budget in (None, DayBudget(today, tokens=10**9)):
        thread = await new_thread(db, "svc")
        await turn(db, thread, "one", "reply one")
        admission = Admission(cap=5, budget=budget)
        opened.append(await _open(runtime, thread, "two", admission))
        assert admission.refused == []
        assert await _contents(db, thread) == [*_DONE, ("complete", "two"), STREAMING]
    histories = [[text for _, text, _ in each.history] for each in opened]
    assert histories == [["one", "reply one"]] * 2
    for each in opened:
        assert each.user is not None and each.user.created_at < each.assistant.created_at
        assert each.thread.user_id == "svc"


async def test_a_refusal_at_the_cap_stores_nothing(runtime: Runtime) -> None:
    db = runtime.db
    busy = await new_thread(db, "svc")
    await _open(runtime, busy, "streaming")
    thread = await new_thread(db, "svc")
    admission = Admission(cap=1)
    with pytest.raises(Refusal):
        await _open(runtime, thread, "two", admission)
    assert admission.refused == [Refused(other_streams=1)]  # the other thread's answer
    assert await _contents(db, thread) == []


async def test_a_spent_budget_is_refused_with_what_was_spent_and_stores_nothing(
        runtime: Runtime) -> None:
    """The admission is given both figures, the day's usage and the other streams, and says
    which refusal the user reads (app.turn.admission.gate: the budget first)."""
    db = runtime.db
    thread = await new_thread(db, "svc")
    await turn(db, thread, "one", "reply one")
    today = dt.datetime.now(dt.UTC).date()
    admission = Admission(cap=1, budget=DayBudget(today, tokens=150))
    with pytest.raises(Refusal):
        await _open(runtime, thread, "two", admission)
    assert admission.refused == [Refused(spent=(150, 0.001), other_streams=0)]
    assert await _contents(db, thread) == _DONE
