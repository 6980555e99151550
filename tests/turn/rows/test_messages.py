"""Both histories (what the user sees, what the model sees) and the sweep of abandoned
answers, on both backends. A turn's own writes: test_turn_rows.py."""

from __future__ import annotations

import datetime as dt

import pytest
from sqlalchemy import select, update

from app.core.clock import utcnow
from app.store.db import Database
from app.store.errors import MessageAlreadyFinished
from app.store.models import Message
from app.store.visibility import is_hidden
from app.threads import repository as threads_store
from app.turn.rows import messages as messages_store
from app.turn.rows import turn_rows
from tests.store.factories import finish, legacy_prompt, new_thread, open_rows, turn


async def test_history_is_in_turn_order_with_assistant_after_user(db: Database) -> None:
    thread = await new_thread(db)
    pairs = [await turn(db, thread, f"question {i}", f"answer {i}") for i in range(5)]
    async with db.transaction() as s:
        history = await threads_store.visible_history(s, "alice", thread.id)
    assert [m.content for m in history] == [
        text for i in range(5) for text in (f"question {i}", f"answer {i}")
    ]
    for user, assistant in pairs:
        assert assistant.created_at > user.created_at
    stamps = [m.created_at for m in history]
    assert stamps == sorted(stamps) and len(set(stamps)) == len(stamps)


async def test_visible_history_of_another_user_is_empty(db: Database) -> None:
    thread = await new_thread(db, "alice")
    await turn(db, thread, "secret", "ok")
    async with db.transaction() as s:
        assert await threads_store.visible_history(s, "bob", thread.id) == []
        assert await threads_store.get_message(s, "bob", thread.id) is None


async def test_synthetic_hidden_from_history_but_in_context(db: Database) -> None:
    thread = await new_thread(db)
    await turn(db, thread, "hello", "hi there")
    opened = await open_rows(db, thread, "Continue our conversation naturally.",
                             synthetic=True, trigger_type="check_in",
                             trigger_reason="No activity for 300 seconds")
    synthetic = opened.user
    assert synthetic is not None
    assert synthetic.synthetic is True and synthetic.trigger_type == "check_in"
    assert synthetic.meta == {"synthetic": True, "trigger_type": "check_in",
                              "trigger_reason": "No activity for 300 seconds"}
    async with db.transaction() as s:
        visible = await threads_store.visible_history(s, "alice", thread.id)
        debug = await threads_store.visible_history(s, "alice", thread.id, include_synthetic=True)
        context = await messages_store.context_history(s, thread.id, limit=10)
    # the prompt's answer, still streaming, is the user's to see; the prompt is not
    assert [m.content for m in visible if m.status != "streaming"] == ["hello", "hi there"]
    assert [m.content for m in debug][-2] == "Continue our conversation naturally."
    assert [m.content for m in context] == [
        "hello", "hi there", "Continue our conversation naturally."]


@pytest.mark.parametrize("flag", ["true", 1, "True", {"x": 1}, None])
async def test_synthetic_is_strict(db: Database, flag: object) -> None:
    thread = await new_thread(db)
    opened = await open_rows(db, thread, "am I synthetic?", synthetic=flag,  # type: ignore[arg-type]
                             trigger_type="check_in")
    message = opened.user
    assert message is not None
    async with db.transaction() as s:
        # Rows imported from elsewhere with a non-boolean flag in metadata stay visible too.
        s.add(Message(thread_id=thread.id, user_id="alice", role="user", content="imported",
                      meta={"synthetic": flag, "trigger_type": "check_in"},
                      created_at=utcnow(), updated_at=utcnow()))
    assert message.synthetic is False and message.meta == {} and message.trigger_type is None
    async with db.transaction() as s:
        visible = await threads_store.visible_history(s, "alice", thread.id)
    assert [m.content for m in visible if m.status != "streaming"] == [
        "am I synthetic?", "imported"]
    assert not any(is_hidden(m) for m in visible)


async def test_metadata_true_alone_hides_an_imported_row(db: Database) -> None:
    thread = await new_thread(db)
    async with db.transaction() as s:
        s.add(Message(thread_id=thread.id, user_id="alice", role="user", content="imported",
                      meta={"synthetic": True}, synthetic=False,
                      created_at=utcnow(), updated_at=utcnow()))
    async with db.transaction() as s:
        assert await threads_store.visible_history(s, "alice", thread.id) == []
        [row] = await threads_store.visible_history(s, "alice", thread.id, include_synthetic=True)
    assert is_hidden(row)


async def test_legacy_followup_content_is_hidden(db: Database) -> None:
    thread = await new_thread(db)
    for content in ("[AUTONOMOUS_FOLLOWUP: check_in] Continue", "[autonomous_followup: x]",
                    "[AUTONOMOUSXFOLLOWUP: y]", "see [AUTONOMOUS_FOLLOWUP: z]"):
        await legacy_prompt(db, thread, content)
    async with db.transaction() as s:
        visible = await threads_store.visible_history(s, "alice", thread.id)
    # Only the exact, case-sensitive prefix counts (`_` is not a wildcard here).
    assert [m.content for m in visible] == [
        "[autonomous_followup: x]", "[AUTONOMOUSXFOLLOWUP: y]", "see [AUTONOMOUS_FOLLOWUP: z]"]
    assert [is_hidden(m) for m in visible] == [False] * 3


async def test_a_user_writing_the_legacy_prefix_still_sees_their_message(db: Database) -> None:
    """The legacy rule is for rows older gateways wrote; this gateway says `synthetic: false`
    on a user's own message that happens to start the same way."""
    thread = await new_thread(db)
    own, _ = await turn(db, thread, "[AUTONOMOUS_FOLLOWUP: check_in] what does this mean?",
                        "an answer")
    plain, _ = await turn(db, thread, "plain words", "another")
    assert (own.meta, plain.meta) == ({"synthetic": False}, {})
    async with db.transaction() as s:
        visible = await threads_store.visible_history(s, "alice", thread.id)
    assert [m.id for m in visible][::2] == [own.id, plain.id]
    assert not is_hidden(visible[0])


async def test_context_history_newest_n_oldest_first_without_failed_or_empty(
    db: Database,
) -> None:
    thread = await new_thread(db)
    await turn(db, thread, "one", "reply one")
    await turn(db, thread, "two", "", status="interrupted")  # empty: nothing said
    await turn(db, thread, "three", "broken", status="failed")
    await turn(db, thread, "four", "partial reply", status="interrupted")
    await open_rows(db, thread, "five")  # the turn in progress
    async with db.transaction() as s:
        everything = await messages_store.context_history(s, thread.id, limit=100)
        newest = await messages_store.context_history(s, thread.id, limit=3)
    assert [m.content for m in everything] == [
        "one", "reply one", "two", "three", "four", "partial reply", "five"]
    assert [m.content for m in newest] == ["four", "partial reply", "five"]


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
    thread, fresh_thread, claimed_thread = (await new_thread(db), await new_thread(db),
                                            await new_thread(db))
    stale = (await open_rows(db, thread, None)).assistant
    fresh = (await open_rows(db, fresh_thread, None)).assistant
    # as old, but a process streams it: the age never sweeps it (its process's death does)
    claimed = (await open_rows(db, claimed_thread, None, process_id="some-process")).assistant
    async with db.transaction() as s:
        await s.execute(update(Message).where(Message.id.in_([stale.id, claimed.id]))
                        .values(created_at=utcnow() - dt.timedelta(minutes=30)))
    async with db.transaction() as s:
        assert await messages_store.interrupt_stale_streaming(s, dt.timedelta(minutes=10)) == 1
    async with db.transaction() as s:
        assert await messages_store.interrupt_stale_streaming(s, dt.timedelta(minutes=10)) == 0
        swept, live = await s.get(Message, stale.id), await s.get(Message, fresh.id)
        still = await s.get(Message, claimed.id)
    assert swept is not None and swept.status == "interrupted"
    assert swept.meta["interrupted_reason"] == "stale_streaming" and swept.completed_at is None
    assert live is not None and live.status == "streaming"
    assert still is not None and still.status == "streaming"
    # The thread is free again, and a late finish stores nothing: a swept row stands.
    with pytest.raises(MessageAlreadyFinished):
        await finish(db, stale.id, "late but real", calls=[], metadata={})
    async with db.transaction(read_only=True) as s:
        kept = await s.get(Message, stale.id)
    assert kept is not None and kept.status == "interrupted" and kept.content == ""


async def test_history_until_an_answer_is_the_models_history_up_to_it(db: Database) -> None:
    """A Responses continuation's history: up to the answer named (not past it), what the
    model sees of a thread (no failed answer, no empty row), and an answer that was only a
    tool call kept with its calls; another user's answer, or a question, is no answer."""
    thread = await new_thread(db)
    await turn(db, thread, "first", "one")
    await turn(db, thread, "broken", "", status="failed")
    tool_calls = [{"id": "c1", "type": "function",
                   "function": {"name": "f", "arguments": "{}"}}]
    question, called = await turn(db, thread, "call it", "",
                                  metadata={"tool_calls": tool_calls})
    await turn(db, thread, "silent", "")
    _, named = await turn(db, thread, "second", "two")
    await turn(db, thread, "later", "three")
    rows = turn_rows(db)
    found = await rows.history_until("alice", named.id, limit=200)
    assert found is not None
    thread_id, history = found
    assert thread_id == thread.id
    assert [(r.role, r.content, r.tool_calls) for r in history] == [
        ("user", "first", None), ("assistant", "one", None), ("user", "broken", None),
        ("user", "call it", None), ("assistant", "", tool_calls), ("user", "silent", None),
        ("user", "second", None), ("assistant", "two", None)]
    assert [r.created_at for r in history] == sorted(r.created_at for r in history)
    newest = await rows.history_until("alice", named.id, limit=2)
    assert newest is not None and [r.content for r in newest[1]] == ["second", "two"]
    assert await rows.history_until("bob", named.id, limit=200) is None
    assert await rows.history_until("alice", question.id, limit=200) is None
    assert called.id != named.id
