"""Row objects made from Core statements' rows (app.store.models.unattached)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from sqlalchemy import select

from app.store import threads as threads_store
from app.store.db import Database
from app.store.models import Thread
from tests.store.factories import new_thread

ROOT = Path(__file__).resolve().parents[2]


async def test_a_row_a_core_statement_returned_is_updated_by_a_session_not_copied(
    db: Database,
) -> None:
    """The opened thread is the stored row to a session, as a row it had loaded would be: a
    change to it updates that row, where a new object would be inserted again (and refused
    by its primary key)."""
    thread = await new_thread(db, "alice", "Trip")
    async with db.transaction() as s:
        opened = await threads_store.open_for_turn(s, "alice", thread.id)
    assert opened is not None and opened.thread.title == "Trip"
    async with db.transaction() as s:
        s.add(opened.thread)
        opened.thread.title = "Trip to Prague"
    async with db.transaction() as s:
        stored = (await s.execute(select(Thread).where(Thread.user_id == "alice"))).scalars()
        assert [(t.id, t.title) for t in stored] == [(thread.id, "Trip to Prague")]


def test_a_process_whose_first_statement_is_a_core_one_makes_row_objects() -> None:
    """A gateway whose first request after a start is a turn on PostgreSQL reads the thread
    with a Core statement before any ORM query has configured the mappers."""
    code = ("import uuid\n"
            "from app.store.models import Thread, table_of, unattached\n"
            "row = dict.fromkeys(table_of(Thread).c)\n"
            "row[table_of(Thread).c.id] = thread_id = uuid.uuid4()\n"
            "row[table_of(Thread).c.title] = 'Trip'\n"
            "made = unattached(Thread, row)\n"
            "assert (made.id, made.title, made.summary) == (thread_id, 'Trip', None)\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
