"""The turn repository's contract: what a turn's opening, finish and bill store, and what they
refuse having stored nothing. Every test runs on SQLite and on PostgreSQL (the `db`
fixture): one behaviour, asserted once, for both implementations."""

from __future__ import annotations

import asyncio
import datetime as dt
import uuid

import pytest
from sqlalchemy import func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from app.answer.records import FinishedMessage
from app.core.clock import utcnow
from app.followups.repository import list_followups, schedule_followup
from app.store import ContentTooLong, ThreadBusy
from app.store.db import Database
from app.store.errors import MessageAlreadyFinished, MessageNotFound
from app.store.models import LlmCall, Message, Thread, UserTokenUsage
from app.threads import repository as threads_store
from app.turn.rows import (
    DayBudget,
    FinishedRow,
    Opened,
    OpeningRequest,
    Refused,
    SweptAnswer,
    turn_rows,
)
from app.turn.rows import messages as messages_store
from app.usage import reports_repository as usage_reports
from app.usage.repository import utc_day
from tests.store.factories import (
    call,
    finish,
    new_thread,
    open_rows,
    schedule_due_followup,
    thread_rows,
    turn,
)
from tests.support.databases import postgres_only
from tests.support.locks import until_a_lock_is_awaited
from tests.support.statements import driver_compiles, recorded_statements


def _request(thread: Thread, content: str | None = "two", *, user_id: str | None = None,
             history_limit: int = 10, **kwargs: object) -> OpeningRequest:
    return OpeningRequest(user_id or thread.user_id, thread.id, content,
                          history_limit=history_limit, **kwargs)  # type: ignore[arg-type]


async def _open(db: Database, thread: Thread, content: str | None = "two", **kwargs: object
                ) -> Opened | Refused | None:
    return await turn_rows(db).open(_request(thread, content, **kwargs))


async def _followups(db: Database, thread: Thread) -> list[str]:
    async with db.transaction(read_only=True) as s:
        return [f.status for f in await list_followups(s, thread.id)]


async def _moved_at(db: Database, thread: Thread) -> dt.datetime | None:
    async with db.transaction(read_only=True) as s:
        return await s.scalar(select(Thread.updated_at).where(Thread.id == thread.id))


async def test_an_opening_stores_the_turn_after_its_history_and_cancels_follow_ups(
        db: Database) -> None:
    thread = await new_thread(db)
    await turn(db, thread, "one", "reply one")
    await turn(db, thread, "broken", "lost", status="failed")
    await schedule_due_followup(db, thread)
    opened = await _open(db, thread, history_limit=2)
    assert isinstance(opened, Opened) and opened.user is not None
    assert [(role, text) for role, text, _ in opened.history] == [
        ("assistant", "reply one"), ("user", "broken")]  # the failed answer left out
    assert opened.history[-1][2] < opened.user.created_at < opened.assistant.created_at
    assert await thread_rows(db, thread) == [
        ("user", "one", "complete"), ("assistant", "reply one", "complete"),
        ("user", "broken", "complete"), ("assistant", "lost", "failed"),
        ("user", "two", "complete"), ("assistant", "", "streaming")]
    async with db.transaction(read_only=True) as s:
        stored = {m.id: m.created_at for m in await threads_store.visible_history(
            s, thread.user_id, thread.id)}
    user, assistant = opened.user, opened.assistant
    assert stored[user.id] == user.created_at < assistant.created_at == stored[assistant.id]
    assert (user.status, assistant.status, assistant.completed_at) == (
        "complete", "streaming", None)
    assert await _followups(db, thread) == ["cancelled"]
    assert await _moved_at(db, thread) == opened.thread.updated_at > thread.updated_at


async def test_the_history_is_the_newest_messages_oldest_first(db: Database) -> None:
    """Past the limit the newest messages, oldest first, two of one time in the order of
    their ids, each time aware UTC: messages.context_rows' rows. A thread's first turn has
    none, and so has an opening asked for none."""
    first = await new_thread(db)
    opened = await _open(db, first)
    assert isinstance(opened, Opened) and opened.history == []
    thread = await new_thread(db)
    for n in range(6):
        await turn(db, thread, f"question {n}", f"answer {n}")
    async with db.transaction() as s:
        times = (await s.execute(select(Message.id, Message.created_at)
                                 .where(Message.thread_id == thread.id)
                                 .order_by(Message.created_at))).all()
        await s.execute(update(Message).where(Message.id == times[5].id)
                        .values(created_at=times[4].created_at))
        expected = await messages_store.context_rows(s, thread.id, limit=10)
    opened = await _open(db, thread)
    assert isinstance(opened, Opened) and opened.history == expected
    assert [text for _, text, _ in expected][::9] == ["question 1", "answer 5"]
    assert all(at.tzinfo is dt.UTC for _, _, at in opened.history)
    await finish(db, opened.assistant.id, "done")
    unasked = await _open(db, thread, "three", history_limit=0)
    assert isinstance(unasked, Opened) and unasked.history == []


async def test_the_turn_is_ordered_after_a_newest_message_from_a_clock_ahead(
        db: Database) -> None:
    """Another process's clock ran ahead: the new rows still come after its message, the
    answer after the question."""
    thread = await new_thread(db)
    await turn(db, thread, "one", "reply one")
    ahead = utcnow() + dt.timedelta(hours=1)
    async with db.transaction() as s:
        await s.execute(update(Message).where(Message.thread_id == thread.id)
                        .values(created_at=ahead))
    opened = await _open(db, thread)
    assert isinstance(opened, Opened) and opened.user is not None
    assert ahead < opened.user.created_at < opened.assistant.created_at
    assert [row[1] for row in await thread_rows(db, thread)][-2:] == ["two", ""]


async def test_a_missing_or_foreign_thread_opens_nothing_and_cancels_nothing(
        db: Database) -> None:
    thread = await new_thread(db, "bob")
    await schedule_due_followup(db, thread)
    assert await _open(db, thread, user_id="alice") is None
    assert await _open(db, Thread(id=uuid.uuid4(), user_id="alice")) is None
    assert await thread_rows(db, thread) == []
    assert await _followups(db, thread) == ["pending"]
    assert await _moved_at(db, thread) == thread.updated_at


async def test_a_thread_streaming_already_is_busy_and_keeps_its_follow_ups(
        db: Database) -> None:
    thread = await new_thread(db)
    assert isinstance(await _open(db, thread, "one"), Opened)
    await schedule_due_followup(db, thread)
    with pytest.raises(ThreadBusy):
        await _open(db, thread)
    with pytest.raises(ThreadBusy):
        await _open(db, thread, None)
    assert await thread_rows(db, thread) == [("user", "one", "complete"),
                                             ("assistant", "", "streaming")]
    assert await _followups(db, thread) == ["pending"]


async def test_content_too_long_is_refused_before_any_statement(db: Database) -> None:
    thread = await new_thread(db)
    with recorded_statements(db) as statements, pytest.raises(ContentTooLong):
        await _open(db, thread, "x" * 101, max_chars=100)
    assert statements == []
    assert await thread_rows(db, thread) == []
    assert isinstance(await _open(db, thread, "🙂" * 100, max_chars=100), Opened)


async def test_at_the_stream_cap_nothing_is_stored_and_the_count_comes_back(
        db: Database) -> None:
    """The cap counts the user's OTHER streaming answers, every thread, not another user's."""
    for owner in ("alice", "alice", "bob"):
        assert isinstance(await _open(db, await new_thread(db, owner)), Opened)
    thread = await new_thread(db)
    await schedule_due_followup(db, thread)
    refused = await _open(db, thread, stream_cap=2)
    assert refused == Refused(other_streams=2)
    assert await thread_rows(db, thread) == []
    assert await _followups(db, thread) == ["pending"]
    opened = await _open(db, thread, stream_cap=3)
    assert isinstance(opened, Opened)
    assert await _open(db, await new_thread(db), None, stream_cap=3) == Refused(
        other_streams=3)


async def test_a_spent_daily_budget_stores_nothing_and_says_what_was_spent(
        db: Database) -> None:
    thread = await new_thread(db)
    await turn(db, thread, "one", "reply one", calls=[call(prompt=100, completion=20,
                                                          cost=0.5)])
    today = utcnow().astimezone(dt.UTC).date()
    spent = await _open(db, thread, budget=DayBudget(today, tokens=120), stream_cap=5)
    assert isinstance(spent, Refused) and spent.spent == (120, 0.5)
    assert spent.over_budget(DayBudget(today, tokens=120)) and spent.other_streams == 0
    assert isinstance(await _open(db, thread, budget=DayBudget(today, cost_usd=0.5)),
                      Refused)
    assert len(await thread_rows(db, thread)) == 2
    tomorrow = DayBudget(today + dt.timedelta(days=1), tokens=120, cost_usd=0.5)
    assert isinstance(await _open(db, thread, budget=tomorrow), Opened)


async def test_a_synthetic_opening_leaves_the_follow_ups(db: Database) -> None:
    thread = await new_thread(db)
    await schedule_due_followup(db, thread)
    opened = await _open(db, thread, "checking in", synthetic=True, trigger_type="check_in",
                         trigger_reason="idle")
    assert isinstance(opened, Opened) and opened.user is not None
    assert opened.history == [] and opened.user.synthetic
    assert opened.user.meta == {"synthetic": True, "trigger_type": "check_in",
                                "trigger_reason": "idle"}
    assert await _followups(db, thread) == ["pending"]


async def test_a_turn_without_a_question_stores_its_answers_row_alone(db: Database) -> None:
    """An OpenAI tool round continues an exchange whose question is stored: the answer's row
    alone, after the thread's newest message, and the follow-ups stay."""
    thread = await new_thread(db)
    _, answer = await turn(db, thread, "one", "calling a tool")
    await schedule_due_followup(db, thread)
    opened = await _open(db, thread, None, history_limit=0)
    assert isinstance(opened, Opened) and opened.user is None
    assert opened.assistant.created_at > answer.created_at
    assert [row[0] for row in await thread_rows(db, thread)] == ["user", "assistant",
                                                                 "assistant"]
    assert await _followups(db, thread) == ["pending"]


async def test_a_guard_reads_under_the_thread_lock_and_its_refusal_stores_nothing(
        db: Database) -> None:
    thread = await new_thread(db)
    seen: list[int] = []

    async def counting(session: AsyncSession, thread_id: uuid.UUID) -> None:
        seen.append(len(await threads_store.visible_history(session, "alice", thread_id)))

    async def refusing(session: AsyncSession, thread_id: uuid.UUID) -> None:
        raise LookupError("the follow-up is no longer wanted")

    rows = turn_rows(db)
    with pytest.raises(LookupError):
        await rows.open(_request(thread, "never"), refusing)
    assert await thread_rows(db, thread) == []
    assert await _moved_at(db, thread) == thread.updated_at
    opened = await rows.open(_request(thread, "one"), counting)
    assert isinstance(opened, Opened) and seen == [0]
    assert await rows.open(_request(thread, user_id="bob"), refusing) is None


async def test_openings_that_count_streams_serialise_on_the_users_lock(db: Database) -> None:
    """Three openings of one user's turns on three threads at once, each under a cap of one
    other stream: each counts the answers of the ones stored before it and never its own, so
    exactly two pass, and each reads its history all the same."""
    threads = [await new_thread(db) for _ in range(3)]
    await turn(db, threads[0], "one", "reply one")
    opened = await asyncio.gather(*(_open(db, thread, "hi", stream_cap=2)
                                    for thread in threads))
    passed = [o for o in opened if isinstance(o, Opened)]
    assert len(passed) == 2
    assert [o for o in opened if not isinstance(o, Opened)] == [Refused(other_streams=2)]
    histories = {o.thread.id: [text for _, text, _ in o.history] for o in passed}
    assert histories.get(threads[0].id, ["one", "reply one"]) == ["one", "reply one"]


async def test_concurrent_turns_on_one_thread_one_wins(db: Database) -> None:
    thread = await new_thread(db)

    async def start_turn(n: int) -> str:
        try:
            await _open(db, thread, f"turn {n}")
            return "opened"
        except ThreadBusy:
            return "busy"

    outcomes = await asyncio.gather(*(start_turn(n) for n in range(4)))
    assert sorted(outcomes) == ["busy", "busy", "busy", "opened"]
    # The busy turns stored nothing: not even their user messages.
    assert [row[0] for row in await thread_rows(db, thread)] == ["user", "assistant"]


@postgres_only("SQLite serialises write transactions; row locks are PostgreSQL's")
async def test_an_opening_behind_a_finish_sees_its_answer(db: Database) -> None:
    """The finish of the thread's last turn holds the thread's row; an opening waits for it,
    and then reads the answer it committed (a snapshot taken before the lock would see the
    row still streaming: the answer left out of the history, the opening refused as busy)."""
    thread = await new_thread(db)
    first = await open_rows(db, thread, "one")

    async def hold(session: AsyncSession, row: FinishedRow) -> None:
        opening.append(asyncio.create_task(_open(db, thread, "two")))
        await until_a_lock_is_awaited(db)

    opening: list[asyncio.Task[Opened | Refused | None]] = []
    await turn_rows(db).finish(FinishedMessage(first.assistant.id, "reply one", {},
                                               "complete", []), hook=hold)
    second = await opening[0]
    assert isinstance(second, Opened)
    assert [text for _, text, _ in second.history] == ["one", "reply one"]


async def test_an_opening_is_one_statement_compiled_once(
        db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    """Compiling the opening costs milliseconds of CPU: every turn after the first runs the
    SQL compiled for the first. On PostgreSQL it is one statement outside a transaction
    (each statement is a round trip, and under load each waits for passes of the event
    loop); on SQLite, whose statements make no trip, the thread's UPDATE, the history, the
    rows, the cancel and the count."""
    await _open(db, await new_thread(db, "someone else"), stream_cap=5)
    thread = await new_thread(db)
    await turn(db, thread, "one", "reply one")
    compiled = driver_compiles(monkeypatch)
    with recorded_statements(db) as statements:
        opened = await _open(db, thread, stream_cap=5)
    assert isinstance(opened, Opened)
    assert [text for _, text, _ in opened.history] == ["one", "reply one"]
    kinds = [kind for kind, cached in statements if cached]
    assert kinds == (["WITH"] if db.backend == "postgresql" else
                     ["WITH", "SELECT", "INSERT", "UPDATE", "SELECT"])
    assert len(kinds) == len(statements) and compiled == []


async def test_a_finish_stores_the_message_its_calls_and_the_rollup(db: Database) -> None:
    thread = await new_thread(db)
    calls = [call("gpt-4o", 1000, 300, cost=0.01), call("gpt-4o-mini", 50, 8, stage="title",
                                                         cost=None)]
    metadata = {"tokens": 1358, "prompt_tokens": 1050, "completion_tokens": 308,
                "model": "gpt-4o", "usage_source": "provider",
                "processingDetails": {"llm_calls": [{"stage": "main"}, {"stage": "title"}]}}
    opened = await open_rows(db, thread, "q")
    row = await turn_rows(db).finish(FinishedMessage(opened.assistant.id, "the answer",
                                                     metadata, "complete", calls))
    assistant = row.message
    assert assistant.status == "complete" and assistant.content == "the answer"
    assert assistant.completed_at is not None and assistant.completed_at >= assistant.created_at
    assert assistant.tokens == 1358 and assistant.meta == metadata
    assert row.thread_autonomy == (thread.autonomy or {})
    assert await _moved_at(db, thread) == assistant.completed_at
    async with db.transaction(read_only=True) as s:
        rows = (await s.execute(select(LlmCall).order_by(LlmCall.stage))).scalars().all()
        usage = {u.model: u for u in (await s.execute(select(UserTokenUsage))).scalars()}
    assert [(r.stage, r.model, r.total_tokens, r.cost_usd) for r in rows] == [
        ("main", "gpt-4o", 1300, 0.01), ("title", "gpt-4o-mini", 58, None)]
    assert all(r.message_id == assistant.id and r.thread_id == thread.id
               and r.user_id == "alice" for r in rows)
    main, title = usage["gpt-4o"], usage["gpt-4o-mini"]
    assert (main.total_tokens, main.message_count, main.llm_call_count) == (1300, 1, 1)
    assert (title.total_tokens, title.message_count, title.llm_call_count) == (58, 0, 1)
    assert title.cost_usd is None and title.unpriced_call_count == 1
    assert main.period_type == "day" and main.period_start == assistant.completed_at.date()
    await turn(db, thread, "again", "same models", calls=calls, metadata=metadata)
    async with db.transaction(read_only=True) as s:
        usage = {u.model: u for u in (await s.execute(select(UserTokenUsage))).scalars()}
    assert (usage["gpt-4o"].total_tokens, usage["gpt-4o"].message_count) == (2600, 2)
    assert (usage["gpt-4o-mini"].llm_call_count, usage["gpt-4o-mini"].cost_usd) == (2, None)


async def test_a_failed_finish_rolls_everything_back(db: Database) -> None:
    thread = await new_thread(db)
    opened = await open_rows(db, thread, "q")
    bad = [call(), call(source="guessed")]  # violates the usage_source check constraint
    with pytest.raises(IntegrityError):
        await turn_rows(db).finish(FinishedMessage(opened.assistant.id, "lost", {"tokens": 1},
                                                   "complete", bad))
    async with db.transaction(read_only=True) as s:
        row = await s.get(Message, opened.assistant.id)
        assert row is not None and (row.status, row.content) == ("streaming", "")
        assert await s.scalar(select(func.count()).select_from(LlmCall)) == 0
        assert await s.scalar(select(func.count()).select_from(UserTokenUsage)) == 0


async def test_a_finish_twice_or_of_a_missing_message_stores_nothing(db: Database) -> None:
    thread = await new_thread(db)
    _, assistant = await turn(db, thread, "q", "a")
    rows = turn_rows(db)
    with pytest.raises(MessageAlreadyFinished):
        await rows.finish(FinishedMessage(assistant.id, "again", {}, "complete", [call()]))
    with pytest.raises(MessageNotFound):
        await rows.finish(FinishedMessage(uuid.uuid4(), "x", {}, "complete", [call()]))
    with pytest.raises(ValueError):
        await rows.finish(FinishedMessage(assistant.id, "x", {}, "streaming", []))
    async with db.transaction(read_only=True) as s:
        assert await s.scalar(select(func.count()).select_from(LlmCall)) == 1
        content = await s.scalar(select(Message.content).where(Message.id == assistant.id))
    assert content == "a"


async def test_a_finish_is_one_statement_compiled_once(db: Database,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """As the opening: the thread, the message, its calls and the rollup in one round trip
    on PostgreSQL, compiled once a turn with as many calls and models has finished."""
    calls = [call("a", 100, 20), call("b", 10, 2, stage="title")]
    await turn(db, await new_thread(db, "someone else"), "warm", "up", calls=calls)
    thread = await new_thread(db)
    opened = await open_rows(db, thread, "one")
    compiled = driver_compiles(monkeypatch)
    with recorded_statements(db) as statements:
        stored = await finish(db, opened.assistant.id, "reply", calls=calls, metadata={})
    assert stored.content == "reply" and stored.thread_id == thread.id
    kinds = [kind for kind, cached in statements if cached]
    assert kinds == (["WITH"] if db.backend == "postgresql"
                     else ["UPDATE", "UPDATE", "INSERT", "INSERT", "INSERT"])
    assert len(kinds) == len(statements) and compiled == []
    async with db.transaction(read_only=True) as s:
        usage = (await s.execute(
            select(UserTokenUsage.model, UserTokenUsage.total_tokens, UserTokenUsage.message_count)
            .where(UserTokenUsage.user_id == "alice").order_by(UserTokenUsage.model))).all()
        stages = (await s.scalars(select(LlmCall.stage).where(
            LlmCall.message_id == opened.assistant.id).order_by(LlmCall.stage))).all()
    assert [tuple(row) for row in usage] == [("a", 120, 1), ("b", 12, 0)]
    assert stages == ["main", "title"]


@postgres_only("SQLite serialises write transactions; row locks are PostgreSQL's")
async def test_a_finish_takes_the_thread_before_its_message(db: Database) -> None:
    """Every transaction that writes a thread's messages locks the thread's row first, so
    none can wait for another in a circle. A finish waiting for its thread holds nothing of
    its message yet."""
    thread = await new_thread(db)
    opened = await open_rows(db, thread, "one")
    async with db.transaction() as holder:
        await threads_store.touch_thread(holder, thread.id)
        finishing = asyncio.create_task(finish(db, opened.assistant.id, "reply one"))
        await until_a_lock_is_awaited(db)
        await holder.execute(select(Message.id).where(Message.id == opened.assistant.id)
                             .with_for_update(nowait=True))
    assert (await finishing).content == "reply one"


async def test_a_finish_hook_writes_in_the_finish_transaction(db: Database) -> None:
    """A hook's writes commit with the message, and a hook that fails rolls the message back
    with them: the finish stored nothing, and may be tried again."""
    thread = await new_thread(db)
    opened = await open_rows(db, thread, "one")
    message = FinishedMessage(opened.assistant.id, "reply", {}, "complete", [call()])

    async def failing(session: AsyncSession, row: FinishedRow) -> None:
        await threads_store.set_title(session, thread.id, "never")
        raise RuntimeError("the hook failed")

    async def titling(session: AsyncSession, row: FinishedRow) -> None:
        assert row.message.content == "reply"
        await threads_store.set_title(session, thread.id, "set by the hook")

    rows = turn_rows(db)
    with pytest.raises(RuntimeError):
        await rows.finish(message, hook=failing)
    assert (await thread_rows(db, thread))[-1] == ("assistant", "", "streaming")
    await rows.finish(message, hook=titling)
    async with db.transaction(read_only=True) as s:
        stored = await threads_store.get_thread(s, "alice", thread.id)
        assert await s.scalar(select(func.count()).select_from(LlmCall)) == 1
    assert stored is not None and stored.title == "set by the hook"
    assert (await thread_rows(db, thread))[-1] == ("assistant", "reply", "complete")


async def test_a_bill_records_calls_without_a_message(db: Database) -> None:
    """Calls made for no stored message are counted as a finished turn's: their rows, with
    no message or thread, and the user's rollup."""
    rows = turn_rows(db)
    await rows.bill("carol", [call("m", 100, 20, cost=0.25),
                              call("m", 10, 2, stage="title", cost=None)])
    await rows.bill("carol", [])
    async with db.transaction(read_only=True) as s:
        calls = (await s.execute(select(LlmCall).order_by(LlmCall.stage))).scalars().all()
        [usage] = (await s.execute(select(UserTokenUsage))).scalars().all()
    assert [(c.stage, c.message_id, c.thread_id, c.user_id, c.total_tokens) for c in calls] == [
        ("main", None, None, "carol", 120), ("title", None, None, "carol", 12)]
    assert (usage.user_id, usage.total_tokens, usage.llm_call_count, usage.cost_usd) == (
        "carol", 132, 2, 0.25)


async def test_a_real_message_cancels_the_threads_follow_ups_a_synthetic_does_not(
        db: Database) -> None:
    thread = await new_thread(db)
    other = await new_thread(db)
    async with db.transaction() as s:
        for t in (thread, other):
            await schedule_followup(s, thread_id=t.id, user_id="alice", trigger_type="check_in",
                                    reason="idle", due_at=utcnow() + dt.timedelta(minutes=5))
    prompt = await open_rows(db, thread, "prompt", synthetic=True, trigger_type="check_in",
                             trigger_reason="idle")
    await finish(db, prompt.assistant.id, "answer")
    assert await _followups(db, thread) == ["pending"]
    await open_rows(db, thread, "I'm back")
    async with db.transaction(read_only=True) as s:
        [cancelled] = await list_followups(s, thread.id)
        [untouched] = await list_followups(s, other.id)
    assert cancelled.status == "cancelled" and cancelled.finished_at is not None
    assert untouched.status == "pending"


async def test_the_cancel_is_rolled_back_with_a_refused_opening(db: Database) -> None:
    """A guard's refusal rolls back the whole opening, the follow-ups' cancel with it."""
    thread = await new_thread(db)
    await schedule_due_followup(db, thread)

    async def refusing(session: AsyncSession, thread_id: uuid.UUID) -> None:
        raise RuntimeError("the turn failed before commit")

    with pytest.raises(RuntimeError):
        await turn_rows(db).open(_request(thread, "never stored"), refusing)
    assert await _followups(db, thread) == ["pending"]
    assert await thread_rows(db, thread) == []


async def test_a_thread_is_free_again_once_its_answer_finished(db: Database) -> None:
    thread = await new_thread(db)
    first = await open_rows(db, thread, None)
    with pytest.raises(ThreadBusy):
        await open_rows(db, thread, None)
    await finish(db, first.assistant.id, "done", calls=[], metadata={})
    again = await open_rows(db, thread, None)
    assert again.assistant.status == "streaming"


async def test_a_finish_stores_the_reasoning_apart_and_its_calls_reasoning_tokens(
        db: Database) -> None:
    """The answer's reasoning and thinking time in their own columns (the text and the
    metadata untouched by them), each call's reasoning tokens in its row and in the day's
    rollup; an answer without reasoning stores NULL for both, a call that reported none
    adds 0."""
    thread = await new_thread(db)
    _, thought = await turn(db, thread, "q", "Hello!", reasoning="I should greet.",
                            reasoning_ms=1250, metadata={"tokens": 150},
                            calls=[call("r1", 100, 50, reasoning=30)])
    _, plain = await turn(db, thread, "q2", "Plain.", reasoning="", reasoning_ms=7,
                          calls=[call("r1", 10, 5), call("r1", 10, 5, stage="title",
                                                             reasoning=2)])
    assert (thought.content, thought.reasoning, thought.reasoning_ms) == (
        "Hello!", "I should greet.", 1250)
    assert thought.meta == {"tokens": 150}
    assert (plain.reasoning, plain.reasoning_ms) == (None, None)
    _, stepped = await turn(db, thread, "q3", "Later.", reasoning="hmm", reasoning_ms=-40,
                            calls=[])
    assert (stepped.reasoning, stepped.reasoning_ms) == ("hmm", 0)
    async with db.transaction(read_only=True) as s:
        stored = await s.get(Message, thought.id)
        tokens = (await s.execute(select(LlmCall.message_id, LlmCall.stage,
                                         LlmCall.reasoning_tokens))).all()
        [usage] = (await s.execute(select(UserTokenUsage))).scalars().all()
    assert stored is not None and stored.reasoning == "I should greet."
    assert sorted((m == thought.id, stage, n) for m, stage, n in tokens) == [
        (False, "main", None), (False, "title", 2), (True, "main", 30)]
    assert (usage.completion_tokens, usage.reasoning_tokens) == (60, 32)


async def test_a_bill_and_a_swept_bill_count_reasoning_tokens(db: Database) -> None:
    rows = turn_rows(db)
    await rows.bill("carol", [call("m", 100, 20, reasoning=12), call("m", 1, 1)])
    thread = await new_thread(db, "carol")
    opened = await open_rows(db, thread, "q")
    async with db.transaction() as s:
        await rows.bill_swept(s, [SweptAnswer(opened.assistant.id, thread.id, "carol",
                                              [call("m", 5, 5, reasoning=4)])])
    async with db.transaction(read_only=True) as s:
        tokens = sorted((await s.scalars(select(LlmCall.reasoning_tokens))).all(),
                        key=lambda n: -1 if n is None else n)
        day = utc_day(utcnow())  # the bill and the swept bill: a rollup in two shards
        [usage] = (await usage_reports.stored_rollups(s, day, day)).values()
    assert tokens == [None, 4, 12]
    assert (usage.llm_call_count, usage.reasoning_tokens) == (3, 16)


async def test_a_checkpoint_keeps_the_reasoning_the_user_saw(db: Database) -> None:
    """A running answer's reasoning so far is written with its text, so a crash keeps it;
    a checkpoint without reasoning leaves what an earlier one wrote, and none is written
    over a finished row."""
    thread, other = await new_thread(db), await new_thread(db)
    running = (await open_rows(db, thread, "q")).assistant
    done = (await open_rows(db, other, "q")).assistant
    await finish(db, done.id, "final", reasoning="final thoughts", calls=[])
    async with db.transaction() as s:
        await messages_store.checkpoint_contents(
            s, {running.id: "", done.id: "x"}, now=utcnow(),
            reasonings={running.id: "thinking so far", done.id: "stale"})
    async with db.transaction() as s:
        await messages_store.checkpoint_contents(s, {running.id: "Hel"}, now=utcnow())
    async with db.transaction(read_only=True) as s:
        first, second = await s.get(Message, running.id), await s.get(Message, done.id)
    assert first is not None and (first.content, first.reasoning, first.status) == (
        "Hel", "thinking so far", "streaming")
    assert second is not None and (second.content, second.reasoning) == (
        "final", "final thoughts")
