"""SQLite's turn opening and finish on the sqlite3 connection: what the same writes in a
session store, and everything they must refuse, stored nothing of."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest
from sqlalchemy import func, select, update
from sqlalchemy.exc import IntegrityError

from app.clock import utcnow
from app.records import FinishedMessage
from app.store import ContentTooLong, ThreadBusy, sqlite_turns
from app.store import messages as messages_store
from app.store.db import Database
from app.store.errors import MessageAlreadyFinished, MessageNotFound
from app.store.followups import list_followups
from app.store.messages import FinishedRow, OpenedExchange
from app.store.models import LlmCall, Message, Thread, UserTokenUsage
from tests.store.factories import call, new_thread, schedule_due_followup, thread_rows, turn
from tests.support.statements import recorded_statements


@pytest.fixture
def lite(db: Database) -> Database:
    if db.backend != "sqlite":
        pytest.skip("the sqlite3 connection's statements are SQLite's opening")
    return db


async def _open(db: Database, thread: Thread, content: str = "two", *,
                user_id: str | None = None, count_streams: bool = True, max_chars: int = 100
                ) -> tuple[Thread, OpenedExchange] | None:
    async with db.sqlite_writes() as writes:
        return sqlite_turns.open_turn_rows(
            writes, user_id or thread.user_id, thread.id, content, history_limit=10,
            count_streams=count_streams, max_chars=max_chars)


async def _followups(db: Database, thread: Thread) -> list[str]:
    async with db.read() as s:
        return [f.status for f in await list_followups(s, thread.id)]


async def test_an_opening_stores_the_turn_after_its_history_and_cancels_follow_ups(
        lite: Database) -> None:
    thread = await new_thread(lite)
    await turn(lite, thread, "one", "reply one")
    await schedule_due_followup(lite, thread)
    with recorded_statements(lite) as statements:
        opened = await _open(lite, thread)
    assert statements == [("WITH", True), ("SELECT", True), ("INSERT", True),
                          ("UPDATE", True), ("SELECT", True)]  # all compiled once
    assert opened is not None
    moved, exchange = opened
    assert [text for _, text, _ in exchange.history] == ["one", "reply one"]
    assert exchange.other_streams == 0
    assert await thread_rows(lite, thread) == [("user", "one", "complete"),
                                         ("assistant", "reply one", "complete"),
                                         ("user", "two", "complete"),
                                         ("assistant", "", "streaming")]
    async with lite.read() as s:
        stored = {m.id: m.created_at for m in await messages_store.visible_history(
            s, thread.user_id, thread.id)}
        updated_at = await s.scalar(select(Thread.updated_at).where(Thread.id == thread.id))
    user, assistant = exchange.user, exchange.assistant
    assert stored[user.id] == user.created_at < assistant.created_at == stored[assistant.id]
    assert await _followups(lite, thread) == ["cancelled"]
    assert updated_at == moved.updated_at > thread.updated_at


async def test_the_history_is_what_an_opening_in_a_session_reads(lite: Database) -> None:
    first = await new_thread(lite)
    opened = await _open(lite, first)
    assert opened is not None and opened[1].history == []
    thread = await new_thread(lite)
    for n in range(6):
        await turn(lite, thread, f"question {n}", f"answer {n}")
    async with lite.transaction() as s:
        expected = await messages_store.context_rows(s, thread.id, limit=10)
    opened = await _open(lite, thread)
    assert opened is not None and opened[1].history == expected
    assert [text for _, text, _ in expected][::9] == ["question 1", "answer 5"]
    assert all(at.tzinfo is dt.UTC for _, _, at in opened[1].history)


async def test_the_turn_is_ordered_after_a_newest_message_from_a_clock_ahead(
        lite: Database) -> None:
    thread = await new_thread(lite)
    await turn(lite, thread, "one", "reply one")
    ahead = utcnow() + dt.timedelta(hours=1)
    async with lite.transaction() as s:
        await s.execute(update(Message).where(Message.thread_id == thread.id)
                        .values(created_at=ahead))
    opened = await _open(lite, thread)
    assert opened is not None
    assert ahead < opened[1].user.created_at < opened[1].assistant.created_at


async def test_a_missing_or_foreign_thread_opens_nothing_and_cancels_nothing(
        lite: Database) -> None:
    thread = await new_thread(lite, "bob")
    await schedule_due_followup(lite, thread)
    assert await _open(lite, thread, user_id="alice") is None
    assert await _open(lite, Thread(id=uuid.uuid4(), user_id="alice")) is None
    assert await thread_rows(lite, thread) == []
    assert await _followups(lite, thread) == ["pending"]


async def test_a_thread_streaming_already_is_busy_and_nothing_is_stored(lite: Database
                                                                       ) -> None:
    thread = await new_thread(lite)
    assert await _open(lite, thread, "one") is not None
    await schedule_due_followup(lite, thread)
    with pytest.raises(ThreadBusy):
        await _open(lite, thread)
    assert await thread_rows(lite, thread) == [("user", "one", "complete"),
                                         ("assistant", "", "streaming")]
    assert await _followups(lite, thread) == ["pending"]


async def test_content_too_long_is_refused_before_any_statement(lite: Database) -> None:
    thread = await new_thread(lite)
    with recorded_statements(lite) as statements, pytest.raises(ContentTooLong):
        await _open(lite, thread, "x" * 101)
    assert statements == []
    assert await thread_rows(lite, thread) == []


async def test_the_count_is_of_the_users_other_streams(lite: Database) -> None:
    for _ in range(2):
        assert await _open(lite, await new_thread(lite)) is not None
    assert await _open(lite, await new_thread(lite, "bob")) is not None  # another user's
    opened = await _open(lite, await new_thread(lite))
    assert opened is not None and opened[1].other_streams == 2
    uncounted = await _open(lite, await new_thread(lite), count_streams=False)
    assert uncounted is not None and uncounted[1].other_streams is None


async def _opened_assistant(db: Database, thread: Thread) -> uuid.UUID:
    opened = await _open(db, thread, "q")
    assert opened is not None
    return opened[1].assistant.id


async def _finish(db: Database, finished: FinishedMessage) -> FinishedRow:
    async with db.sqlite_writes() as writes:
        return sqlite_turns.finish_turn_rows(writes, finished)


async def test_a_finish_stores_what_a_sessions_finish_stores(lite: Database) -> None:
    """The same turn finished both ways: the same message, calls and rollup, counted twice."""
    calls = [call("gpt-4o", 1000, 300, cost=0.01),
             call("gpt-4o-mini", 50, 8, stage="title", cost=None)]
    metadata = {"tokens": 1358, "model": "gpt-4o", "usage_source": "provider"}
    stored = []
    for way in ("session", "sqlite3"):
        thread = await new_thread(lite)
        message_id = await _opened_assistant(lite, thread)
        finished = FinishedMessage(message_id, "the answer", metadata, "complete", calls)
        with recorded_statements(lite) as statements:
            if way == "session":
                async with lite.transaction(quick=True) as s:
                    row = await messages_store.finish_assistant_message(s, finished)
            else:
                row = await _finish(lite, finished)
        if way == "sqlite3":
            assert statements == [("UPDATE", True), ("UPDATE", True), ("INSERT", True),
                                  ("INSERT", True), ("INSERT", True)]  # calls, 2 models
        async with lite.read() as s:
            message = await s.get(Message, message_id)
            moved = await s.scalar(select(Thread.updated_at).where(Thread.id == thread.id))
            rows = (await s.execute(select(LlmCall).where(LlmCall.message_id == message_id)
                                    .order_by(LlmCall.stage))).scalars().all()
        assert message is not None and row.message.id == message_id
        assert row.message.completed_at == message.completed_at == moved
        assert row.thread_autonomy == (thread.autonomy or {})
        stored.append(((message.status, message.content, message.meta, message.tokens),
                       [(r.stage, r.model, r.total_tokens, r.cost_usd,
                         r.thread_id == thread.id, r.user_id) for r in rows]))
    assert stored[0] == stored[1]
    assert all(names_thread for *_, names_thread, _ in stored[1][1])
    async with lite.read() as s:
        usage = {u.model: u for u in (await s.execute(select(UserTokenUsage))).scalars()}
    assert (usage["gpt-4o"].total_tokens, usage["gpt-4o"].message_count) == (2600, 2)
    assert (usage["gpt-4o-mini"].llm_call_count, usage["gpt-4o-mini"].cost_usd) == (2, None)


async def test_a_finish_twice_or_of_a_missing_message_stores_nothing(lite: Database) -> None:
    thread = await new_thread(lite)
    message_id = await _opened_assistant(lite, thread)
    await _finish(lite, FinishedMessage(message_id, "a", {}, "complete", [call()]))
    with pytest.raises(MessageAlreadyFinished):
        await _finish(lite, FinishedMessage(message_id, "again", {}, "complete", [call()]))
    with pytest.raises(MessageNotFound):
        await _finish(lite, FinishedMessage(uuid.uuid4(), "x", {}, "complete", [call()]))
    with pytest.raises(ValueError):
        await _finish(lite, FinishedMessage(message_id, "x", {}, "streaming", []))
    async with lite.read() as s:
        assert await s.scalar(select(func.count()).select_from(LlmCall)) == 1
        content = await s.scalar(select(Message.content).where(Message.id == message_id))
    assert content == "a"


async def test_a_failed_finish_rolls_everything_back(lite: Database) -> None:
    thread = await new_thread(lite)
    message_id = await _opened_assistant(lite, thread)
    bad = [call(), call(source="guessed")]  # violates the usage_source check constraint
    with pytest.raises(IntegrityError):
        await _finish(lite, FinishedMessage(message_id, "lost", {"tokens": 1}, "complete", bad))
    async with lite.read() as s:
        row = await s.get(Message, message_id)
        assert row is not None and (row.status, row.content) == ("streaming", "")
        assert await s.scalar(select(func.count()).select_from(LlmCall)) == 0
        assert await s.scalar(select(func.count()).select_from(UserTokenUsage)) == 0
