"""SQLite: a user's turn opened with the sqlite3 connection's own statements
(Database.sqlite_writes), as threads.open_for_turn and then messages.open_exchange open it in
a session: the thread's UPDATE (its move to the top; SQLite's write lock is the thread's
lock), the history the model is shown, the turn's two rows, the cancel of the thread's
follow-ups and the count of the user's streams. The same statements, compiled once, run with
no await between them from BEGIN to COMMIT, so the write lock is held for their CPU time
only. PostgreSQL's opening is one statement (app.store.turn_openings)."""

from __future__ import annotations

import functools
import uuid

from sqlalchemy import bindparam, insert

from app.clock import utcnow
from app.store import threads
from app.store.driver_statements import DriverStatement
from app.store.followups import cancel_pending_statement
from app.store.limits import COUNT_STREAMING
from app.store.messages import (
    MAX_CONTENT_CHARS,
    OpenedExchange,
    assistant_values,
    busy_on_conflict,
    check_length,
    context_select,
    inserted_params,
    inserted_values,
    time_after,
    user_values,
)
from app.store.models import Message, Thread, detached, table_of, unattached
from app.store.sqlite_writes import SqliteWrites

_MESSAGES = table_of(Message)
_OPEN_THREAD = DriverStatement(threads.open_for_turn_update(
    bindparam("thread_id", type_=table_of(Thread).c.id.type)))
_INSERT_MESSAGE = DriverStatement(insert(_MESSAGES).values(inserted_params("")))
_CANCEL_FOLLOWUPS = DriverStatement(cancel_pending_statement(True))
_COUNT_STREAMS = DriverStatement(COUNT_STREAMING)


@functools.cache
def _history(limit: int) -> DriverStatement:
    """messages.context_rows' statement, built once per limit."""
    m = _MESSAGES.c
    return DriverStatement(context_select(limit, m.role, m.content, m.created_at))


def open_turn_rows(
    writes: SqliteWrites, user_id: str, thread_id: uuid.UUID, content: str, *,
    history_limit: int, count_streams: bool, max_chars: int = MAX_CONTENT_CHARS,
    process_id: str | None = None,
) -> tuple[Thread, OpenedExchange] | None:
    """A real user message's turn: the opened thread and the turn's rows, with the history
    read before the rows were stored and, with `count_streams`, the user's other streaming
    answers in `other_streams` (the caller refuses the turn there by raising, which rolls
    the transaction back). None for a missing or foreign thread. Raises ContentTooLong
    before any statement, ThreadBusy when the thread already streams."""
    check_length(content, max_chars)
    found = writes.rows(_OPEN_THREAD, {"thread_id": thread_id, "owner": user_id,
                                       "now": utcnow()})
    if not found:
        return None
    [row] = found
    thread = unattached(Thread, row)
    history = [(r["role"], r["content"], r["created_at"])
               for r in reversed(writes.rows(_history(history_limit), {"context_of": thread_id}))]
    user = user_values(thread_id, user_id, content, synthetic=False, trigger_type=None,
                       trigger_reason=None, max_chars=max_chars,
                       now=time_after(row["newest_message_at"]))
    assistant = assistant_values(thread_id, user_id, time_after(user["created_at"]), process_id)
    with busy_on_conflict(thread_id):
        writes.run_many(_INSERT_MESSAGE, [inserted_values(user), inserted_values(assistant)])
    writes.run(_CANCEL_FOLLOWUPS, {"of_thread": thread_id, "now": utcnow()})
    others = (int(writes.scalar(_COUNT_STREAMS, {"user_id": user_id})) - 1
              if count_streams else None)
    return thread, OpenedExchange(detached(Message, user), detached(Message, assistant),
                                  history, others)
