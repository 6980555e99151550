"""Row objects of stored rows (models.detached, unattached), as a session takes them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from sqlalchemy import select

from app.store.db import Database
from app.store.models import Message, Thread
from tests.store.factories import new_thread, open_rows

ROOT = Path(__file__).resolve().parents[2]


async def test_a_row_a_core_statement_returned_is_updated_by_a_session_not_copied(
    db: Database,
) -> None:
    """The opened thread is the stored row to a session, as a row it had loaded would be: a
    change to it updates that row, where a new object would be inserted again (and refused
    by its primary key)."""
    thread = await new_thread(db, "alice", "Trip")
    opened = await open_rows(db, thread, None)
    assert opened.thread.title == "Trip"
    async with db.transaction() as s:
        s.add(opened.thread)
        opened.thread.title = "Trip to Prague"
    async with db.transaction() as s:
        stored = (await s.execute(select(Thread).where(Thread.user_id == "alice"))).scalars()
        assert [(t.id, t.title) for t in stored] == [(thread.id, "Trip to Prague")]


async def test_a_turns_new_rows_are_the_stored_rows_to_a_session(db: Database) -> None:
    """The opening's two rows, stored by Core statements, come back as those rows: their
    times are the stored ones, and a session they are added to updates them."""
    thread = await new_thread(db, "alice")
    opened = await open_rows(db, thread, "hello", history_limit=10)
    assert opened.user is not None
    async with db.transaction() as s:
        s.add(opened.assistant)
        opened.assistant.content = "hi"
    async with db.transaction() as s:
        stored = (await s.execute(select(Message).where(Message.thread_id == thread.id)
                                  .order_by(Message.created_at))).scalars().all()
    assert [(m.id, m.created_at, m.completed_at, m.content) for m in stored] == [
        (opened.user.id, opened.user.created_at, opened.user.created_at, "hello"),
        (opened.assistant.id, opened.assistant.created_at, None, "hi")]


def test_a_process_whose_first_statement_is_a_core_one_makes_row_objects() -> None:
    """A gateway whose first request after a start is a turn on PostgreSQL reads the thread
    with a Core statement before any ORM query has configured the mappers."""
    code = ("import uuid\n"
            "from app.store.models import Thread, table_of, unattached\n"
            "row = dict.fromkeys(column.name for column in table_of(Thread).c)\n"
            "row['id'] = thread_id = uuid.uuid4()\n"
            "row['title'] = 'Trip'\n"
            "made = unattached(Thread, row)\n"
            "assert (made.id, made.title, made.summary) == (thread_id, 'Trip', None)\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
