"""PostgreSQL's one-statement turn opening: what it stores, and everything it must refuse or
leave to the opening in a transaction, stored nothing of."""

from __future__ import annotations

import asyncio
import datetime as dt
import uuid

import pytest
from sqlalchemy import select, update

from app.clock import utcnow
from app.records import FinishedMessage
from app.store import ThreadBusy, turn_openings
from app.store import messages as messages_store
from app.store.db import Database
from app.store.followups import list_followups
from app.store.models import Message, Thread
from app.store.turn_openings import OneStatementOpening
from tests.store.factories import new_thread, schedule_due_followup, thread_rows, turn
from tests.support.locks import until_a_lock_is_awaited
from tests.support.statements import (
    driver_compiles,
    recorded_statements,
    statements_in_transaction,
)


@pytest.fixture
def pg(db: Database) -> Database:
    if db.backend != "postgresql":
        pytest.skip("one statement in autocommit is PostgreSQL's opening")
    return db


async def _open(db: Database, thread: Thread, content: str = "two", *,
                stream_cap: int | None = None, user_id: str | None = None
                ) -> OneStatementOpening | None:
    async with db.one_statement() as s:
        return await turn_openings.open_turn_rows(
            s, user_id or thread.user_id, thread.id, content, history_limit=10,
            stream_cap=stream_cap)


async def test_an_opening_stores_the_turn_after_its_history_in_one_round_trip(pg: Database
                                                                              ) -> None:
    thread = await new_thread(pg)
    await turn(pg, thread, "one", "reply one")
    await schedule_due_followup(pg, thread)
    with statements_in_transaction(pg) as statements:
        opening = await _open(pg, thread, stream_cap=3)
    assert statements == [("WITH", False)]
    assert opening is not None and opening.outcome == "opened"
    assert opening.exchange is not None and opening.thread is not None
    assert [text for _, text, _ in opening.exchange.history] == ["one", "reply one"]
    assert opening.other_streams == opening.exchange.other_streams == 0
    assert await thread_rows(pg, thread) == [("user", "one", "complete"),
                                       ("assistant", "reply one", "complete"),
                                       ("user", "two", "complete"),
                                       ("assistant", "", "streaming")]
    async with pg.read() as s:
        stored = {m.id: m.created_at for m in await messages_store.visible_history(
            s, thread.user_id, thread.id)}
        followups = await list_followups(s, thread.id)
        moved = await s.scalar(select(Thread.updated_at).where(Thread.id == thread.id))
    user, assistant = opening.exchange.user, opening.exchange.assistant
    assert stored[user.id] == user.created_at < assistant.created_at == stored[assistant.id]
    assert [f.status for f in followups] == ["cancelled"]
    assert moved == opening.thread.updated_at > thread.updated_at


async def test_the_history_is_what_an_opening_in_a_transaction_reads(pg: Database) -> None:
    """Past the limit the newest messages, oldest first, two of one time in the order of
    their ids, each time aware UTC: messages.context_rows' rows, which the opening in a
    transaction reads. A thread's first turn has none."""
    first = await new_thread(pg)
    opening = await _open(pg, first)
    assert opening is not None and opening.exchange is not None
    assert opening.exchange.history == []
    thread = await new_thread(pg)
    for n in range(6):
        await turn(pg, thread, f"question {n}", f"answer {n}")
    async with pg.transaction() as s:
        times = (await s.execute(select(Message.id, Message.created_at)
                                 .where(Message.thread_id == thread.id)
                                 .order_by(Message.created_at))).all()
        await s.execute(update(Message).where(Message.id == times[5].id)
                        .values(created_at=times[4].created_at))
        expected = await messages_store.context_rows(s, thread.id, limit=10)
    opening = await _open(pg, thread)
    assert opening is not None and opening.exchange is not None
    assert opening.exchange.history == expected
    assert [text for _, text, _ in expected][::9] == ["question 1", "answer 5"]
    assert all(at.tzinfo is dt.UTC for _, _, at in opening.exchange.history)


async def test_the_turn_is_ordered_after_a_newest_message_from_a_clock_ahead(pg: Database
                                                                             ) -> None:
    """Another process's clock ran ahead: the new rows still come after its message."""
    thread = await new_thread(pg)
    await turn(pg, thread, "one", "reply one")
    ahead = utcnow() + dt.timedelta(hours=1)
    async with pg.transaction() as s:
        await s.execute(update(Message).where(Message.thread_id == thread.id)
                        .values(created_at=ahead))
    opening = await _open(pg, thread)
    assert opening is not None and opening.exchange is not None
    assert ahead < opening.exchange.user.created_at < opening.exchange.assistant.created_at
    assert [row[1] for row in await thread_rows(pg, thread)][-2:] == ["two", ""]


async def test_a_missing_or_foreign_thread_opens_nothing_and_cancels_nothing(pg: Database
                                                                             ) -> None:
    thread = await new_thread(pg, "bob")
    await schedule_due_followup(pg, thread)
    assert await _open(pg, thread, user_id="alice") is None
    missing = Thread(id=uuid.uuid4(), user_id="alice")
    assert await _open(pg, missing) is None
    assert await thread_rows(pg, thread) == []
    async with pg.read() as s:
        assert [f.status for f in await list_followups(s, thread.id)] == ["pending"]


async def test_a_thread_streaming_already_is_busy_and_keeps_its_follow_ups(pg: Database
                                                                         ) -> None:
    thread = await new_thread(pg)
    first = await _open(pg, thread, "one")
    assert first is not None and first.outcome == "opened"
    await schedule_due_followup(pg, thread)
    with pytest.raises(ThreadBusy):
        await _open(pg, thread)
    assert await thread_rows(pg, thread) == [("user", "one", "complete"),
                                       ("assistant", "", "streaming")]
    async with pg.read() as s:
        assert [f.status for f in await list_followups(s, thread.id)] == ["pending"]


async def test_at_the_stream_cap_nothing_is_stored_and_the_count_comes_back(pg: Database
                                                                           ) -> None:
    streaming = [await new_thread(pg) for _ in range(2)]
    for thread in streaming:
        await _open(pg, thread)
    thread = await new_thread(pg)
    await schedule_due_followup(pg, thread)
    refused = await _open(pg, thread, stream_cap=2)
    assert refused == OneStatementOpening("at_cap", other_streams=2)
    assert await thread_rows(pg, thread) == []
    async with pg.read() as s:
        assert [f.status for f in await list_followups(s, thread.id)] == ["pending"]
    opened = await _open(pg, thread, stream_cap=3)
    assert opened is not None and opened.other_streams == 2


async def test_an_opening_behind_a_finish_stores_nothing_and_says_the_thread_changed(
        pg: Database) -> None:
    """The finish holds the thread's row; the statement's snapshot, taken before it waited,
    would leave the finished answer out of the history, and see it still streaming."""
    thread = await new_thread(pg)
    first = await _open(pg, thread, "one")
    assert first is not None and first.exchange is not None
    async with pg.transaction() as finish:
        await messages_store.finish_assistant_message(finish, FinishedMessage(
            first.exchange.assistant.id, "reply one", {}, "complete", []))
        opening = asyncio.create_task(_open(pg, thread))
        await until_a_lock_is_awaited(pg)
    assert await opening == OneStatementOpening("changed")
    assert await thread_rows(pg, thread) == [("user", "one", "complete"),
                                       ("assistant", "reply one", "complete")]


async def test_the_statement_runs_as_compiled_once(pg: Database,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Compiling the opening costs milliseconds of CPU: every turn after the first runs the
    SQL compiled for the first, with nothing rendered into its text."""
    await _open(pg, await new_thread(pg, "someone else"), stream_cap=5)
    compiled = driver_compiles(monkeypatch)
    with recorded_statements(pg) as statements:
        await _open(pg, await new_thread(pg), stream_cap=5)
    assert statements[-1] == ("WITH", True)
    assert compiled == []
