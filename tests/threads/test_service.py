"""app.threads.service and the thread-event reads on both backends: what a page loads
while turns are writing."""

from __future__ import annotations

import asyncio

from app.events.notices import MessageNotice
from app.store.db import Database
from app.threads import repository as thread_store
from app.threads.service import list_threads, thread_messages
from app.threads.watch import thread_is_users, visible_messages
from tests.store.factories import new_thread, turn


async def test_a_page_loads_while_a_turn_holds_the_write_lock(db: Database) -> None:
    """A turn's write transaction is open (on SQLite: the process's write lock, a thread
    created and not committed): the thread list, a thread's messages and the checks of the
    live view answer at once, with what was committed."""
    thread = await new_thread(db, "alice", "kept")
    question, answer = await turn(db, thread, "q", "a")
    writing, release = asyncio.Event(), asyncio.Event()

    async def a_turn_writing() -> None:
        async with db.transaction() as s:
            await thread_store.create_thread(s, "alice", "not yet committed")
            writing.set()
            await release.wait()

    writer = asyncio.create_task(a_turn_writing())
    try:
        await writing.wait()
        async with asyncio.timeout(5):
            listed = await list_threads(db, "alice")
            messages = await thread_messages(db, "alice", thread.id, include_synthetic=False)
            mine = await thread_is_users(db, "alice", thread.id)
            seen = await visible_messages(db, "alice", MessageNotice(thread.id, (answer.id,)))
    finally:
        release.set()
        await writer
    assert [t["title"] for t in listed] == ["kept"]
    assert messages is not None
    assert [m["id"] for m in messages] == [str(question.id), str(answer.id)]
    assert mine and [m["id"] for m in seen] == [str(answer.id)]
    assert len(await list_threads(db, "alice")) == 2
