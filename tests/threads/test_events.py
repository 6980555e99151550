"""app.threads.watch on both backends, with the in-process bus: a client is told only
about its own thread's settled, visible messages, in the API's message shape."""

from __future__ import annotations

import asyncio
import uuid
from contextlib import aclosing

from app.events.bus import LocalMessageBus
from app.events.notices import MessageNotice
from app.store.db import Database
from app.threads.watch import thread_events, thread_is_users, visible_messages
from tests.store.factories import legacy_prompt, new_thread, open_rows, turn


async def test_only_the_owner_sees_the_thread(db: Database) -> None:
    thread = await new_thread(db, "alice")
    assert await thread_is_users(db, "alice", thread.id)
    assert not await thread_is_users(db, "bob", thread.id)
    assert not await thread_is_users(db, "alice", uuid.uuid4())


async def test_visible_messages_leave_out_what_the_user_must_not_see(db: Database) -> None:
    thread, other = await new_thread(db, "alice"), await new_thread(db, "alice")
    question, answer = await turn(db, thread, "q", "a")
    hidden = await legacy_prompt(db, thread, "[AUTONOMOUS_FOLLOWUP: check_in] hello?")
    _, elsewhere = await turn(db, other, "q2", "a2")
    live = (await open_rows(db, thread, None)).assistant
    notice = MessageNotice(thread.id, (answer.id, hidden.id, live.id, elsewhere.id,
                                       uuid.uuid4(), question.id))
    seen = await visible_messages(db, "alice", notice)
    assert [m["id"] for m in seen] == [str(answer.id), str(question.id)]  # notice order
    assert seen[0]["content"] == "a" and seen[0]["status"] == "complete"
    assert set(seen[0]) == {"id", "parent_id", "role", "content", "status", "metadata",
                            "created_at", "reasoning", "reasoning_ms"}
    assert set(seen[1]) == {"id", "parent_id", "role", "content", "status", "metadata",
                            "created_at"}
    assert seen[0]["parent_id"] == str(question.id)
    assert await visible_messages(db, "bob", notice) == []


async def test_the_stream_says_ready_then_each_new_message_and_unsubscribes(
    db: Database,
) -> None:
    bus = LocalMessageBus()
    thread = await new_thread(db, "alice")
    async with aclosing(thread_events(bus, db, "alice", thread.id)) as events:
        assert await anext(events) == ("ready", {"thread_id": str(thread.id)})
        assert bus.subscriber_count(thread.id) == 1
        _, answer = await turn(db, thread, "q", "a")
        bus.deliver(MessageNotice(thread.id, (answer.id,)))
        name, data = await asyncio.wait_for(anext(events), timeout=5)
        assert name == "message" and data["message"]["id"] == str(answer.id)
    assert bus.subscriber_count(thread.id) == 0
