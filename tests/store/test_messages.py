"""The turn lifecycle and both histories, on both backends."""

from __future__ import annotations

import asyncio
import datetime as dt
import uuid
from typing import Any

import pytest
from sqlalchemy import func, select, update
from sqlalchemy.exc import IntegrityError

from app.clock import utcnow
from app.records import FinishedMessage
from app.store import (
    MessageAlreadyFinished,
    MessageNotFound,
    ThreadBusy,
)
from app.store import messages as messages_store
from app.store import threads as threads_store
from app.store.db import Database
from app.store.followups import list_followups, schedule_followup
from app.store.models import LlmCall, Message, Thread, UserTokenUsage
from app.store.notify import Notification, open_listener
from app.store.visibility import is_hidden
from tests.store.factories import call, legacy_prompt, new_thread, schedule_due_followup, turn
from tests.support.locks import until_a_lock_is_awaited
from tests.support.statements import driver_compiles, recorded_statements


async def test_history_is_in_turn_order_with_assistant_after_user(db: Database) -> None:
    thread = await new_thread(db)
    pairs = [await turn(db, thread, f"question {i}", f"answer {i}") for i in range(5)]
    async with db.transaction() as s:
        history = await messages_store.visible_history(s, "alice", thread.id)
    assert [m.content for m in history] == [
        text for i in range(5) for text in (f"question {i}", f"answer {i}")
    ]
    for user, assistant in pairs:
        assert assistant.created_at > user.created_at
    stamps = [m.created_at for m in history]
    assert stamps == sorted(stamps) and len(set(stamps)) == len(stamps)


async def test_assistant_is_after_user_even_when_the_clock_is_behind(db: Database) -> None:
    thread = await new_thread(db)
    future = utcnow() + dt.timedelta(hours=1)
    async with db.transaction() as s:
        user = await messages_store.append_user_message(s, thread, "from a fast clock")
        await s.execute(update(Message).where(Message.id == user.id).values(created_at=future))
        assistant = await messages_store.open_assistant_message(s, thread)
    assert assistant.created_at > future


async def test_visible_history_of_another_user_is_empty(db: Database) -> None:
    thread = await new_thread(db, "alice")
    await turn(db, thread, "secret", "ok")
    async with db.transaction() as s:
        assert await messages_store.visible_history(s, "bob", thread.id) == []
        assert await messages_store.get_message(s, "bob", thread.id) is None


async def test_synthetic_hidden_from_history_but_in_context(db: Database) -> None:
    thread = await new_thread(db)
    await turn(db, thread, "hello", "hi there")
    async with db.transaction() as s:
        synthetic = await messages_store.append_user_message(
            s, thread, "Continue our conversation naturally.", synthetic=True,
            trigger_type="check_in", trigger_reason="No activity for 300 seconds",
        )
    assert synthetic.synthetic is True and synthetic.trigger_type == "check_in"
    assert synthetic.meta == {"synthetic": True, "trigger_type": "check_in",
                              "trigger_reason": "No activity for 300 seconds"}
    async with db.transaction() as s:
        visible = await messages_store.visible_history(s, "alice", thread.id)
        debug = await messages_store.visible_history(s, "alice", thread.id, include_synthetic=True)
        context = await messages_store.context_history(s, thread.id, limit=10)
    assert [m.content for m in visible] == ["hello", "hi there"]
    assert [m.content for m in debug][-1] == "Continue our conversation naturally."
    assert [m.content for m in context] == [
        "hello", "hi there", "Continue our conversation naturally."]


@pytest.mark.parametrize("flag", ["true", 1, "True", {"x": 1}, None])
async def test_synthetic_is_strict(db: Database, flag: object) -> None:
    thread = await new_thread(db)
    async with db.transaction() as s:
        message = await messages_store.append_user_message(
            s, thread, "am I synthetic?", synthetic=flag, trigger_type="check_in")  # type: ignore[arg-type]
        # Rows imported from elsewhere with a non-boolean flag in metadata stay visible too.
        s.add(Message(thread_id=thread.id, user_id="alice", role="user", content="imported",
                      meta={"synthetic": flag, "trigger_type": "check_in"},
                      created_at=utcnow(), updated_at=utcnow()))
    assert message.synthetic is False and message.meta == {} and message.trigger_type is None
    async with db.transaction() as s:
        visible = await messages_store.visible_history(s, "alice", thread.id)
    assert [m.content for m in visible] == ["am I synthetic?", "imported"]
    assert not any(is_hidden(m) for m in visible)


async def test_metadata_true_alone_hides_an_imported_row(db: Database) -> None:
    thread = await new_thread(db)
    async with db.transaction() as s:
        s.add(Message(thread_id=thread.id, user_id="alice", role="user", content="imported",
                      meta={"synthetic": True}, synthetic=False,
                      created_at=utcnow(), updated_at=utcnow()))
    async with db.transaction() as s:
        assert await messages_store.visible_history(s, "alice", thread.id) == []
        [row] = await messages_store.visible_history(s, "alice", thread.id, include_synthetic=True)
    assert is_hidden(row)


async def test_legacy_followup_content_is_hidden(db: Database) -> None:
    thread = await new_thread(db)
    for content in ("[AUTONOMOUS_FOLLOWUP: check_in] Continue", "[autonomous_followup: x]",
                    "[AUTONOMOUSXFOLLOWUP: y]", "see [AUTONOMOUS_FOLLOWUP: z]"):
        await legacy_prompt(db, thread, content)
    async with db.transaction() as s:
        visible = await messages_store.visible_history(s, "alice", thread.id)
    # Only the exact, case-sensitive prefix counts (`_` is not a wildcard here).
    assert [m.content for m in visible] == [
        "[autonomous_followup: x]", "[AUTONOMOUSXFOLLOWUP: y]", "see [AUTONOMOUS_FOLLOWUP: z]"]
    assert [is_hidden(m) for m in visible] == [False] * 3


async def test_a_user_writing_the_legacy_prefix_still_sees_their_message(db: Database) -> None:
    """The legacy rule is for rows older gateways wrote; this gateway says `synthetic: false`
    on a user's own message that happens to start the same way."""
    thread = await new_thread(db)
    async with db.transaction() as s:
        own = await messages_store.append_user_message(
            s, thread, "[AUTONOMOUS_FOLLOWUP: check_in] what does this mean?")
        plain = await messages_store.append_user_message(s, thread, "plain words")
    assert (own.meta, plain.meta) == ({"synthetic": False}, {})
    async with db.transaction() as s:
        visible = await messages_store.visible_history(s, "alice", thread.id)
    assert [m.id for m in visible] == [own.id, plain.id]
    assert not is_hidden(visible[0])


async def test_real_message_cancels_pending_followups_synthetic_does_not(db: Database) -> None:
    thread = await new_thread(db)
    other = await new_thread(db)
    async with db.transaction() as s:
        for t in (thread, other):
            await schedule_followup(s, thread_id=t.id, user_id="alice", trigger_type="check_in",
                                    reason="idle", due_at=utcnow() + dt.timedelta(minutes=5))
    async with db.transaction() as s:
        await messages_store.append_user_message(
            s, thread, "prompt", synthetic=True, trigger_type="check_in", trigger_reason="idle")
    async with db.transaction() as s:
        assert [f.status for f in await list_followups(s, thread.id)] == ["pending"]
    async with db.transaction() as s:
        await messages_store.append_user_message(s, thread, "I'm back")
    async with db.transaction() as s:
        [cancelled] = await list_followups(s, thread.id)
        [untouched] = await list_followups(s, other.id)
    assert cancelled.status == "cancelled" and cancelled.finished_at is not None
    assert untouched.status == "pending"


async def test_cancel_is_rolled_back_with_the_message(db: Database) -> None:
    thread = await new_thread(db)
    async with db.transaction() as s:
        await schedule_followup(s, thread_id=thread.id, user_id="alice", trigger_type="check_in",
                                reason="idle", due_at=utcnow())
    with pytest.raises(RuntimeError):
        async with db.transaction() as s:
            await messages_store.append_user_message(s, thread, "never stored")
            raise RuntimeError("the turn failed before commit")
    async with db.transaction() as s:
        [followup] = await list_followups(s, thread.id)
        assert await messages_store.visible_history(s, "alice", thread.id) == []
    assert followup.status == "pending"


async def test_second_streaming_message_raises_thread_busy(db: Database) -> None:
    thread = await new_thread(db)
    async with db.transaction() as s:
        first = await messages_store.open_assistant_message(s, thread)
        with pytest.raises(ThreadBusy):
            await messages_store.open_assistant_message(s, thread)
        # The savepoint kept the session usable.
        await messages_store.append_user_message(s, thread, "still usable")
    async with db.transaction() as s:
        await messages_store.finish_assistant_message(
            s, FinishedMessage(first.id, "done", {}, "complete", []))
    async with db.transaction() as s:
        again = await messages_store.open_assistant_message(s, thread)
    assert again.status == "streaming"


async def test_concurrent_turns_on_one_thread_one_wins(db: Database) -> None:
    thread = await new_thread(db)

    async def start_turn(n: int) -> str:
        try:
            async with db.transaction() as s:
                await messages_store.append_user_message(s, thread, f"turn {n}")
                await messages_store.open_assistant_message(s, thread)
            return "opened"
        except ThreadBusy:
            return "busy"

    outcomes = await asyncio.gather(*(start_turn(n) for n in range(4)))
    assert sorted(outcomes) == ["busy", "busy", "busy", "opened"]
    async with db.transaction() as s:
        users = await messages_store.visible_history(s, "alice", thread.id)
    # The busy turns rolled back entirely: their user messages were not stored.
    assert [m.role for m in users] == ["user", "assistant"]


async def test_finish_writes_message_calls_and_rollup(db: Database) -> None:
    thread = await new_thread(db)
    calls = [call("gpt-4o", 1000, 300, cost=0.01), call("gpt-4o-mini", 50, 8, stage="title",
                                                         cost=None)]
    metadata = {"tokens": 1358, "prompt_tokens": 1050, "completion_tokens": 308,
                "model": "gpt-4o", "usage_source": "provider",
                "processingDetails": {"llm_calls": [{"stage": "main"}, {"stage": "title"}]}}
    _, assistant = await turn(db, thread, "q", "the answer", calls=calls, metadata=metadata)
    assert assistant.status == "complete" and assistant.content == "the answer"
    assert assistant.completed_at is not None and assistant.completed_at >= assistant.created_at
    assert assistant.tokens == 1358 and assistant.meta == metadata
    async with db.transaction() as s:
        rows = (await s.execute(select(LlmCall).order_by(LlmCall.stage))).scalars().all()
        usage = {u.model: u for u in (await s.execute(select(UserTokenUsage))).scalars()}
    assert [(r.stage, r.model, r.total_tokens, r.cost_usd) for r in rows] == [
        ("main", "gpt-4o", 1300, 0.01), ("title", "gpt-4o-mini", 58, None)]
    assert all(r.message_id == assistant.id and r.user_id == "alice" for r in rows)
    main, title = usage["gpt-4o"], usage["gpt-4o-mini"]
    assert (main.total_tokens, main.message_count, main.llm_call_count) == (1300, 1, 1)
    assert (title.total_tokens, title.message_count, title.llm_call_count) == (58, 0, 1)
    assert title.cost_usd is None and title.unpriced_call_count == 1
    assert main.period_type == "day" and main.period_start == assistant.completed_at.date()


async def test_failed_finish_rolls_everything_back(db: Database) -> None:
    thread = await new_thread(db)
    async with db.transaction() as s:
        await messages_store.append_user_message(s, thread, "q")
        assistant = await messages_store.open_assistant_message(s, thread)
    bad = [call(), call(source="guessed")]  # violates the usage_source check constraint
    with pytest.raises(IntegrityError):
        async with db.transaction() as s:
            await messages_store.finish_assistant_message(
                s, FinishedMessage(assistant.id, "lost", {"tokens": 1}, "complete", bad))
    async with db.transaction() as s:
        row = await s.get(Message, assistant.id)
        assert row is not None and row.status == "streaming" and row.content == ""
        assert await s.scalar(select(func.count()).select_from(LlmCall)) == 0
        assert await s.scalar(select(func.count()).select_from(UserTokenUsage)) == 0


async def test_finish_twice_or_unknown(db: Database) -> None:
    thread = await new_thread(db)
    _, assistant = await turn(db, thread, "q", "a")
    with pytest.raises(MessageAlreadyFinished):
        async with db.transaction() as s:
            await messages_store.finish_assistant_message(
                s, FinishedMessage(assistant.id, "again", {}, "complete", [call()]))
    with pytest.raises(MessageNotFound):
        async with db.transaction() as s:
            await messages_store.finish_assistant_message(
                s, FinishedMessage(uuid.uuid4(), "x", {}, "complete", []))
    with pytest.raises(ValueError):
        async with db.transaction() as s:
            await messages_store.finish_assistant_message(
                s, FinishedMessage(assistant.id, "x", {}, "streaming", []))
    async with db.transaction() as s:
        assert await s.scalar(select(func.count()).select_from(LlmCall)) == 1


async def test_context_history_newest_n_oldest_first_without_failed_or_empty(
    db: Database,
) -> None:
    thread = await new_thread(db)
    await turn(db, thread, "one", "reply one")
    await turn(db, thread, "two", "", status="interrupted")  # empty: nothing said
    await turn(db, thread, "three", "broken", status="failed")
    await turn(db, thread, "four", "partial reply", status="interrupted")
    async with db.transaction() as s:
        await messages_store.append_user_message(s, thread, "five")
        await messages_store.open_assistant_message(s, thread)  # the turn in progress
    async with db.transaction() as s:
        everything = await messages_store.context_history(s, thread.id, limit=100)
        newest = await messages_store.context_history(s, thread.id, limit=3)
    assert [m.content for m in everything] == [
        "one", "reply one", "two", "three", "four", "partial reply", "five"]
    assert [m.content for m in newest] == ["four", "partial reply", "five"]


async def _open(db: Database, thread: Thread, content: str, **kwargs: Any
                ) -> messages_store.OpenedExchange:
    """A turn's opening as open_turn does it: the thread's lock, then the exchange."""
    async with db.transaction(quick=True) as s:
        opened = await threads_store.open_for_turn(s, thread.user_id, thread.id)
        assert opened is not None
        return await messages_store.open_exchange(s, opened, content, **kwargs)


async def _followup_statuses(db: Database, thread: Thread) -> list[str]:
    async with db.transaction() as s:
        return [f.status for f in await list_followups(s, thread.id)]


async def test_an_opening_reads_the_history_before_storing_its_rows(db: Database) -> None:
    thread = await new_thread(db)
    await turn(db, thread, "one", "reply one")
    await turn(db, thread, "two", "broken", status="failed")
    await turn(db, thread, "three", "reply three")
    await schedule_due_followup(db, thread)
    opened = await _open(db, thread, "four", history_limit=3)
    assert [(role, text) for role, text, _ in opened.history] == [
        ("user", "two"), ("user", "three"), ("assistant", "reply three")]
    assert opened.history[-1][2] < opened.user.created_at < opened.assistant.created_at
    async with db.transaction() as s:
        stored = await messages_store.visible_history(s, "alice", thread.id)
    assert [(m.content, m.status) for m in stored[-2:]] == [
        ("four", "complete"), ("", "streaming")]
    assert [m.id for m in stored[-2:]] == [opened.user.id, opened.assistant.id]
    assert await _followup_statuses(db, thread) == ["cancelled"]


async def test_a_synthetic_opening_leaves_the_follow_ups(db: Database) -> None:
    thread = await new_thread(db)
    await schedule_due_followup(db, thread)
    opened = await _open(db, thread, "checking in", history_limit=10, synthetic=True,
                         trigger_type="check_in", trigger_reason="idle")
    assert opened.history == [] and opened.user.synthetic
    assert await _followup_statuses(db, thread) == ["pending"]


async def test_an_opening_on_a_streaming_thread_is_busy_and_stores_nothing(
    db: Database,
) -> None:
    thread = await new_thread(db)
    first = await _open(db, thread, "first", history_limit=10)
    await schedule_due_followup(db, thread)
    with pytest.raises(ThreadBusy):
        await _open(db, thread, "second", history_limit=10)
    async with db.transaction() as s:
        stored = await messages_store.visible_history(s, "alice", thread.id)
    assert [m.id for m in stored] == [first.user.id, first.assistant.id]
    assert await _followup_statuses(db, thread) == ["pending"]  # the cancel rolled back too


async def test_an_opening_behind_a_finish_sees_its_answer(db: Database) -> None:
    """The finish of the thread's last turn holds the thread's row; an opening waits for it,
    and then reads the answer it committed (a snapshot taken before the lock would see the
    row still streaming: the answer left out of the history, the opening refused as busy)."""
    if db.backend == "sqlite":
        pytest.skip("SQLite serialises write transactions; row locks are PostgreSQL's")
    thread = await new_thread(db)
    first = await _open(db, thread, "one", history_limit=10)
    async with db.transaction() as finish:
        await messages_store.finish_assistant_message(
            finish, FinishedMessage(first.assistant.id, "reply one", {}, "complete", []))
        opening = asyncio.create_task(_open(db, thread, "two", history_limit=10))
        await until_a_lock_is_awaited(db)
    second = await opening
    assert [text for _, text, _ in second.history] == ["one", "reply one"]


async def test_an_opening_is_one_statement_after_the_lock_on_postgresql(db: Database) -> None:
    """Each statement is a round trip to PostgreSQL, and under load each waits for passes of
    the event loop; SQLite's make no trip in a quick transaction. Every statement comes out
    of SQLAlchemy's compiled cache once a turn has opened: compiling the opening's costs
    about 2 ms of CPU."""
    await _open(db, await new_thread(db), "warm", history_limit=10)
    thread = await new_thread(db)
    await turn(db, thread, "one", "reply one")
    with recorded_statements(db) as statements:
        opened = await _open(db, thread, "two", history_limit=10)
    assert [text for _, text, _ in opened.history] == ["one", "reply one"]
    kinds = [kind for kind, _ in statements]
    # the first WITH is the thread's UPDATE (its row found by key: app.store.ownership)
    assert kinds[kinds.index("WITH") + 1:] == (
        ["WITH"] if db.backend == "postgresql" else ["SELECT", "INSERT", "UPDATE"])
    assert all(cached for kind, cached in statements if kind != "BEGIN")


async def test_openings_that_count_streams_serialise_on_the_users_lock(db: Database) -> None:
    """Three openings of one user's turns on three threads at once, each counting the user's
    streams (`count_streams`): on PostgreSQL in the opening's own statement, under the
    user's lock held to the commit, so each counts the answers of the ones committed before
    it and never its own, and each reads its history all the same; on SQLite the caller
    counts (None)."""
    threads = [await new_thread(db) for _ in range(3)]
    await turn(db, threads[0], "one", "reply one")

    async def open_one(thread: Thread) -> messages_store.OpenedExchange:
        async with db.transaction(quick=True) as s:
            opened = await threads_store.open_for_turn(s, thread.user_id, thread.id)
            assert opened is not None
            exchange = await messages_store.open_exchange(
                s, opened, "hi", history_limit=10, count_streams=True)
            await asyncio.sleep(0.05)  # widen the race window; no deadline depends on it
            return exchange

    opened = await asyncio.gather(*(open_one(thread) for thread in threads))
    histories = [[text for _, text, _ in exchange.history] for exchange in opened]
    assert histories == [["one", "reply one"], [], []]
    counts = [exchange.other_streams for exchange in opened]
    if db.backend == "postgresql":
        assert sorted(c for c in counts if c is not None) == [0, 1, 2]
    else:
        assert counts == [None] * 3


async def test_a_finish_is_one_statement_on_postgresql(db: Database,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """As the opening: the thread, the message, its calls and the rollup in one round trip,
    compiled once a turn with as many calls and models has finished."""
    calls = [call("a", 100, 20), call("b", 10, 2, stage="title")]
    await turn(db, await new_thread(db, "someone else"), "warm", "up", calls=calls)
    thread = await new_thread(db)
    opened = await _open(db, thread, "one")
    compiled = driver_compiles(monkeypatch)
    with recorded_statements(db) as statements:
        async with db.transaction(quick=True) as s:
            stored = await messages_store.finish_assistant_message(s, FinishedMessage(
                opened.assistant.id, "reply", {}, "complete", calls))
    assert stored.message.content == "reply" and stored.message.thread_id == thread.id
    kinds = [kind for kind, _ in statements if kind != "BEGIN"]
    assert kinds == (["WITH"] if db.backend == "postgresql"
                     else ["UPDATE", "UPDATE", "INSERT", "INSERT", "INSERT"])
    assert all(cached for kind, cached in statements if kind != "BEGIN")
    assert compiled == []
    async with db.transaction() as s:
        usage = (await s.execute(
            select(UserTokenUsage.model, UserTokenUsage.total_tokens, UserTokenUsage.message_count)
            .where(UserTokenUsage.user_id == "alice").order_by(UserTokenUsage.model))).all()
        stages = (await s.scalars(select(LlmCall.stage).where(
            LlmCall.message_id == opened.assistant.id).order_by(LlmCall.stage))).all()
    assert [tuple(row) for row in usage] == [("a", 120, 1), ("b", 12, 0)]
    assert stages == ["main", "title"]


async def test_a_finish_sends_its_notifications_only_when_it_finishes(db: Database) -> None:
    """A NOTIFY from the finish's statement reaches a listener once the finish commits; a
    second finish of the message (refused) sends none. SQLite has no NOTIFY to send."""
    opened = await _open(db, await new_thread(db), "one")
    ping = Notification("chatgate_test_finish", f"finished {opened.assistant.id}")
    if db.backend == "sqlite":
        with pytest.raises(ValueError, match="PostgreSQL"):
            await _finish(db, opened.assistant.id, "reply", [ping])
        return
    heard: asyncio.Queue[str] = asyncio.Queue()
    listener = await open_listener(db, ping.channel, heard.put_nowait)
    try:
        await _finish(db, opened.assistant.id, "reply", [ping])
        assert await asyncio.wait_for(heard.get(), 10) == ping.payload
        with pytest.raises(MessageAlreadyFinished):
            await _finish(db, opened.assistant.id, "again", [ping])
        await _finish(db, (await _open(db, await new_thread(db), "two")).assistant.id,
                      "other", [Notification(ping.channel, "the next one")])
        assert await asyncio.wait_for(heard.get(), 10) == "the next one"
    finally:
        await listener.close()


async def test_a_finish_takes_the_thread_before_its_message(db: Database) -> None:
    """Every transaction that writes a thread's messages locks the thread's row first, so
    none can wait for another in a circle. A finish waiting for its thread holds nothing of
    its message yet."""
    if db.backend == "sqlite":
        pytest.skip("SQLite serialises write transactions; row locks are PostgreSQL's")
    thread = await new_thread(db)
    opened = await _open(db, thread, "one")
    async with db.transaction() as holder:
        await threads_store.open_for_turn(holder, thread.user_id, thread.id)
        finishing = asyncio.create_task(_finish(db, opened.assistant.id, "reply one"))
        await until_a_lock_is_awaited(db)
        await holder.execute(select(Message.id).where(Message.id == opened.assistant.id)
                             .with_for_update(nowait=True))
    assert (await finishing).message.content == "reply one"


async def _finish(db: Database, message_id: uuid.UUID, content: str,
                  notifications: list[Notification] | None = None
                  ) -> messages_store.FinishedRow:
    async with db.transaction(quick=True) as s:
        return await messages_store.finish_assistant_message(
            s, FinishedMessage(message_id, content, {}, "complete", [call()]),
            notifications or [])


@pytest.mark.parametrize(
    ("tokens", "expected"),
    [(2336, 2336), (0, 0), (12.5, None), ("2336", None), (-3, None), (10**12, None),
     (True, None), (None, None)],
)
async def test_tokens_column_from_metadata(db: Database, tokens: object, expected: int | None
                                           ) -> None:
    thread = await new_thread(db)
    _, assistant = await turn(db, thread, "q", "a", metadata={"tokens": tokens})
    assert assistant.tokens == expected
    async with db.transaction() as s:
        assert await s.scalar(select(Message.tokens).where(Message.id == assistant.id)) == expected


async def test_interrupt_stale_streaming(db: Database) -> None:
    thread, fresh_thread = await new_thread(db), await new_thread(db)
    async with db.transaction() as s:
        stale = await messages_store.open_assistant_message(s, thread)
        fresh = await messages_store.open_assistant_message(s, fresh_thread)
        await s.execute(update(Message).where(Message.id == stale.id)
                        .values(created_at=utcnow() - dt.timedelta(minutes=30)))
    async with db.transaction() as s:
        assert await messages_store.interrupt_stale_streaming(s, dt.timedelta(minutes=10)) == 1
    async with db.transaction() as s:
        assert await messages_store.interrupt_stale_streaming(s, dt.timedelta(minutes=10)) == 0
        swept, live = await s.get(Message, stale.id), await s.get(Message, fresh.id)
    assert swept is not None and swept.status == "interrupted"
    assert swept.meta["interrupted_reason"] == "stale_streaming" and swept.completed_at is None
    assert live is not None and live.status == "streaming"
    # The thread is free again, and a slow process that was still alive may still finish.
    async with db.transaction() as s:
        late = (await messages_store.finish_assistant_message(
            s, FinishedMessage(stale.id, "late but real", {}, "complete", []))).message
    assert late.status == "complete" and late.content == "late but real"
