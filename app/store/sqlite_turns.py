"""SQLite: a turn's opening and its finish with the sqlite3 connection's own statements
(Database.sqlite_writes), as a session runs them: the opening as threads.open_for_turn and
then messages.open_exchange (the thread's UPDATE, its move to the top; SQLite's write lock is
the thread's lock; the history the model is shown, the turn's two rows, the cancel of the
thread's follow-ups, the count of the user's streams), the finish as
messages.finish_assistant_message (the thread's UPDATE, the message's, its calls and the
day's rollup). The same statements, compiled once, run with no await between them from BEGIN
to COMMIT, so the write lock is held for their CPU time only. On PostgreSQL each is one
statement (app.store.turn_openings, app.store.messages)."""

from __future__ import annotations

import functools
import uuid

from sqlalchemy import bindparam, insert, select

from app.clock import utcnow
from app.records import FinishedMessage
from app.store import threads
from app.store.driver_statements import DriverStatement
from app.store.followups import cancel_pending_statement
from app.store.limits import COUNT_STREAMING
from app.store.messages import (
    FINISH_MESSAGE,
    INSERT_CALL,
    MAX_CONTENT_CHARS,
    TOUCH_THREAD_OF_MESSAGE,
    FinishedRow,
    OpenedExchange,
    assistant_values,
    busy_on_conflict,
    call_rows,
    check_length,
    context_rows_select,
    finish_params,
    inserted_params,
    inserted_values,
    not_finished,
    time_after,
    user_values,
)
from app.store.models import Message, Thread, detached, table_of, unattached
from app.store.sqlite_writes import SqliteWrites
from app.store.usage import SQLITE_ROLLUP_UPSERT, turn_rollup_values, utc_day

_MESSAGES = table_of(Message)
_OPEN_THREAD = DriverStatement(threads.OPEN_FOR_TURN)
_INSERT_MESSAGE = DriverStatement(insert(_MESSAGES).values(inserted_params("")))
_CANCEL_FOLLOWUPS = DriverStatement(cancel_pending_statement(True))
_COUNT_STREAMS = DriverStatement(COUNT_STREAMING)
_TOUCH_THREAD = DriverStatement(TOUCH_THREAD_OF_MESSAGE)
_FINISH_MESSAGE = DriverStatement(FINISH_MESSAGE)
_INSERT_CALL = DriverStatement(INSERT_CALL)
_ADD_TO_ROLLUP = DriverStatement(SQLITE_ROLLUP_UPSERT)
_MESSAGE = DriverStatement(select(_MESSAGES.c.id).where(
    _MESSAGES.c.id == bindparam("message_id", type_=_MESSAGES.c.id.type)))


@functools.cache
def _history(limit: int) -> DriverStatement:
    """messages.context_rows' statement as the driver's SQL, once per limit."""
    return DriverStatement(context_rows_select(limit))


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


def finish_turn_rows(writes: SqliteWrites, finished: FinishedMessage) -> FinishedRow:
    """messages.finish_assistant_message: the message stored as finished, its calls and the
    day's rollup. Raises MessageNotFound (its thread was deleted) or MessageAlreadyFinished
    (its usage must not be counted twice); the caller's transaction then stores nothing."""
    params = finish_params(finished)
    touched = writes.rows(_TOUCH_THREAD, params)
    stored = writes.rows(_FINISH_MESSAGE, params)
    if not stored:
        found = writes.scalar(_MESSAGE, params) is not None
        raise not_finished(finished.message_id, found=found)
    message = unattached(Message, stored[0])
    now, calls = params["now"], finished.llm_calls
    if calls:
        writes.run_many(_INSERT_CALL, call_rows(calls, message.user_id, now,
                                                message_id=message.id,
                                                thread_id=message.thread_id))
    for values in turn_rollup_values(utc_day(now), calls):
        writes.run(_ADD_TO_ROLLUP, {"user_id": message.user_id, **values})
    return FinishedRow(message, (touched[0]["autonomy"] if touched else None) or {})
