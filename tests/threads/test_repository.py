"""Threads on both backends: ownership, listing, deletion, title/summary/autonomy."""

from __future__ import annotations

import datetime as dt
import uuid

from sqlalchemy import func, select, update

from app.core.clock import utcnow
from app.followups.repository import schedule_followup
from app.store.db import Database
from app.store.models import Followup, LlmCall, Message
from app.threads import repository as threads_store
from app.turn.rows import OpeningRequest, turn_rows
from tests.store.factories import finish, new_thread, open_rows, turn


async def test_create_and_get_is_scoped_by_user(db: Database) -> None:
    thread = await new_thread(db, "alice", "Trip to Prague")
    async with db.transaction() as s:
        mine = await threads_store.get_thread(s, "alice", thread.id)
        theirs = await threads_store.get_thread(s, "bob", thread.id)
        missing = await threads_store.get_thread(s, "alice", uuid.uuid4())
    assert mine is not None and mine.title == "Trip to Prague" and mine.user_id == "alice"
    assert mine.created_at.tzinfo is not None
    assert theirs is None and missing is None


async def test_opening_for_a_turn_moves_the_thread_up_and_knows_its_newest_message(
    db: Database,
) -> None:
    """The opening finds only the user's own thread; its new rows come after the thread's
    newest message even when that message's writer had a clock running ahead."""
    thread = await new_thread(db, "alice", "Trip to Prague")
    assert await turn_rows(db).open(OpeningRequest("bob", thread.id, "hello")) is None
    assert await turn_rows(db).open(OpeningRequest("alice", uuid.uuid4(), "hello")) is None
    empty = await open_rows(db, thread, "hello", history_limit=10)
    assert empty.history == []  # no newest message yet
    assert empty.thread.title == "Trip to Prague" and empty.thread.updated_at > thread.updated_at
    answer = await finish(db, empty.assistant.id, "hi")
    ahead = answer.created_at + dt.timedelta(hours=1)
    async with db.transaction() as s:
        await s.execute(update(Message).where(Message.id == answer.id).values(created_at=ahead))
    opened = await open_rows(db, thread, "again", history_limit=10)
    assert opened.history[-1] == ("assistant", "hi", ahead)
    assert opened.user is not None and opened.user.created_at > ahead
    assert opened.user.created_at.tzinfo is not None


async def test_list_counts_and_previews_ignore_synthetic_and_legacy(db: Database) -> None:
    thread = await new_thread(db, "alice")
    await turn(db, thread, "What is the capital of France?", "Paris.")
    followup = await open_rows(db, thread, "Continue our conversation naturally.",
                               synthetic=True, trigger_type="check_in", trigger_reason="idle")
    await finish(db, followup.assistant.id, "", status="failed", calls=[])
    async with db.transaction() as s:
        s.add(Message(thread_id=thread.id, user_id="alice", role="user",
                      content="[AUTONOMOUS_FOLLOWUP: check_in] legacy prompt", meta={},
                      created_at=utcnow(), updated_at=utcnow()))
    async with db.transaction() as s:
        [summary] = await threads_store.list_threads(s, "alice")
        assert await threads_store.list_threads(s, "bob") == []
    assert summary.id == thread.id
    assert summary.message_count == 3  # the question, its answer, the follow-up's answer
    assert summary.preview == "Paris."


async def test_preview_is_latest_visible_and_truncated(db: Database) -> None:
    thread = await new_thread(db, "alice")
    long_answer = "x" * 500
    await turn(db, thread, "q", long_answer)
    async with db.transaction() as s:
        [summary] = await threads_store.list_threads(s, "alice")
    assert summary.preview == "x" * threads_store.PREVIEW_CHARS + "…"


async def test_preview_is_plain_words_of_the_markdown(db: Database) -> None:
    thread = await new_thread(db, "alice")
    await turn(db, thread, "q", "Here is what I can tell you about **Break**.\n\n- This answer "
               "comes from the `demo` model.\n- " + "word " * 200)
    async with db.transaction() as s:
        [summary] = await threads_store.list_threads(s, "alice")
    assert summary.preview is not None
    assert summary.preview.startswith(
        "Here is what I can tell you about Break. This answer comes from the demo model. word")
    assert summary.preview.endswith("…") and len(summary.preview) == threads_store.PREVIEW_CHARS + 1


async def test_list_orders_by_latest_activity(db: Database) -> None:
    first = await new_thread(db, "alice", "first")
    second = await new_thread(db, "alice", "second")
    await turn(db, first, "bump", "ok")
    async with db.transaction() as s:
        listed = await threads_store.list_threads(s, "alice")
    assert [t.title for t in listed] == ["first", "second"]
    assert {t.id for t in listed} == {first.id, second.id}
    empty = next(t for t in listed if t.id == second.id)
    assert empty.message_count == 0 and empty.preview is None


async def test_a_list_of_one_origin_leaves_the_others_out(db: Database) -> None:
    chat = await new_thread(db, "alice", "a chat")
    async with db.transaction() as s:
        made = await threads_store.create_thread(s, "alice", origin="responses")
    async with db.transaction() as s:
        chats = await threads_store.list_threads(s, "alice", "chat")
        calls = await threads_store.list_threads(s, "alice", "responses")
        every = await threads_store.list_threads(s, "alice")
    assert [t.id for t in chats] == [chat.id] and chats[0].origin == "chat"
    assert [(t.id, t.origin) for t in calls] == [(made.id, "responses")]
    assert {t.id for t in every} == {chat.id, made.id}


async def test_delete_cascades_but_keeps_usage_rows(db: Database) -> None:
    thread = await new_thread(db, "alice")
    await turn(db, thread, "q", "a")
    async with db.transaction() as s:
        await schedule_followup(s, thread_id=thread.id, user_id="alice", trigger_type="check_in",
                                reason="r", due_at=utcnow())
    async with db.transaction() as s:
        assert await threads_store.delete_thread(s, "bob", thread.id) is False
        assert await threads_store.delete_thread(s, "alice", thread.id) is True
        assert await threads_store.delete_thread(s, "alice", thread.id) is False
    async with db.transaction() as s:
        assert await threads_store.get_thread(s, "alice", thread.id) is None
        assert await s.scalar(select(func.count()).select_from(Message)) == 0
        assert await s.scalar(select(func.count()).select_from(Followup)) == 0
        calls = (await s.execute(select(LlmCall))).scalars().all()
    assert len(calls) == 1 and calls[0].thread_id is None and calls[0].message_id is None


async def test_title_summary_and_autonomy(db: Database) -> None:
    thread = await new_thread(db, "alice")
    async with db.transaction() as s:
        await threads_store.set_title(s, thread.id, "Named")
        await threads_store.set_summary(s, thread.id, "They talked about Paris.")
        updated = await threads_store.set_autonomy(
            s, "alice", thread.id, {"enabled": True, "idle_seconds": 60})
        assert await threads_store.set_autonomy(s, "bob", thread.id, {"enabled": True}) is None
    assert updated is not None and updated.autonomy == {"enabled": True, "idle_seconds": 60}
    async with db.transaction() as s:
        merged = await threads_store.set_autonomy(s, "alice", thread.id, {"max_followups": 1})
    async with db.transaction() as s:
        reread = await threads_store.get_thread(s, "alice", thread.id)
    assert merged is not None
    assert reread is not None
    assert reread.title == "Named" and reread.summary == "They talked about Paris."
    assert reread.autonomy == {"enabled": True, "idle_seconds": 60, "max_followups": 1}
