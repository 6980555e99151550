"""SQLite: a turn's opening, its finish and a bill without a message, each a write
transaction of the sqlite3 connection's own statements (Database.sqlite_writes).

SQLite's write lock is the thread's lock (BEGIN IMMEDIATE serialises every writer), so the
opening's statements may run one after the other: the thread's UPDATE (its move to the
top), the history the model is shown, the turn's rows, the cancel of the thread's
follow-ups, the count of the user's other streams and the day's usage. A refusal raises
inside the transaction, which then stores nothing. The statements are compiled once and run
with no await between them from BEGIN to COMMIT, so the write lock is held for their CPU
time only; without SQLAlchemy's session and execution context, a turn's writes cost half
the CPU. When a guard or a hook must read or write in the same transaction, the same
statements run on the connection of that transaction's session."""

from __future__ import annotations

import datetime as dt
import functools
import uuid
from collections.abc import Sequence

from sqlalchemy import bindparam, insert
from sqlalchemy.dialects import sqlite
from sqlalchemy.ext.asyncio import AsyncSession

from app.answer.records import CallRecord, FinishedMessage
from app.core.clock import utcnow
from app.keys.limits_repository import COUNT_OTHER_STREAMS
from app.store.db import Database
from app.store.driver_statements import DriverStatement
from app.store.models import Message, Thread, UserTokenUsage, detached, table_of, unattached
from app.store.sqlite_writes import SqliteWrites
from app.turn.rows.branches import BRANCH_TO
from app.turn.rows.contract import (
    FinishedRow,
    FinishHook,
    RolledBack,
    SweptAnswer,
    ThreadGuard,
)
from app.turn.rows.messages import context_rows_select
from app.turn.rows.shapes import (
    CallOpening,
    DayBudget,
    Opened,
    OpeningRequest,
    Refused,
    turn_times,
)
from app.turn.rows.statements import (
    DELETE_OPEN_CALL,
    FINISH_MESSAGE,
    INSERT_CALL,
    LOCK_OWNED_THREAD,
    MESSAGE_EXISTS,
    MESSAGES,
    OPEN_CALL_VALUES,
    OPEN_CALLS,
    OPEN_THREAD,
    TOUCH_THREAD_OF_MESSAGE,
    busy_on_conflict,
    call_rows,
    cancel_pending_statement,
    check_length,
    finish_params,
    inserted_params,
    inserted_values,
    new_rows,
    not_finished,
    open_call_params,
)
from app.turn.rows.threads_of_answers import AnswerThreads
from app.usage.repository import (
    ROLLUP_COLUMNS,
    SPENT_ON_DAY,
    adding_on_conflict,
    turn_rollup_values,
    utc_day,
)
from app.usage.shards import RollupShards

_OPEN_THREAD = DriverStatement(OPEN_THREAD)
_BRANCH_TO = DriverStatement(BRANCH_TO)
_LOCK_OWNED_THREAD = DriverStatement(LOCK_OWNED_THREAD)
_INSERT_MESSAGE = DriverStatement(insert(MESSAGES).values(inserted_params("")))
_CANCEL_FOLLOWUPS = DriverStatement(cancel_pending_statement(True))
#: The user's OTHER streams: the new row left out, as PostgreSQL's count does.
_COUNT_OTHER_STREAMS = DriverStatement(COUNT_OTHER_STREAMS)
_INSERT_OPEN_CALL = DriverStatement(insert(OPEN_CALLS).values(OPEN_CALL_VALUES))
_DELETE_OPEN_CALL = DriverStatement(DELETE_OPEN_CALL)
_USAGE = table_of(UserTokenUsage)
_SPENT_ON_DAY = DriverStatement(SPENT_ON_DAY)
_TOUCH_THREAD = DriverStatement(TOUCH_THREAD_OF_MESSAGE)
_FINISH_MESSAGE = DriverStatement(FINISH_MESSAGE)
_MESSAGE_EXISTS = DriverStatement(MESSAGE_EXISTS)
_INSERT_CALL = DriverStatement(INSERT_CALL)
#: The rollup's upsert with a parameter for each column, named as the column (the user's id
#: and turn_rollup_values' keys).
_ADD_TO_ROLLUP = DriverStatement(adding_on_conflict(sqlite.insert(_USAGE).values({
    name: bindparam(name, type_=_USAGE.c[name].type) for name in ROLLUP_COLUMNS})))


@functools.cache
def _history(limit: int) -> DriverStatement:
    return DriverStatement(context_rows_select(limit))


class SqliteTurnRows(AnswerThreads):
    """The turn's repository on SQLite (app.turn.rows.TurnRows), adding usage to the
    rollup's `rollup_shards` in turn."""

    def __init__(self, db: Database, rollup_shards: RollupShards) -> None:
        self.db = db
        self.rollup_shards = rollup_shards

    async def open(self, request: OpeningRequest, guard: ThreadGuard | None = None
                   ) -> Opened | Refused | None:
        check_length(request.content or "", request.max_chars)
        try:
            if guard is None:
                async with self.db.sqlite_writes() as writes:
                    return _open(writes, request)
            async with self.db.transaction(quick=True) as session:
                if not await _LOCK_OWNED_THREAD.rows(
                        session, {"thread_id": request.thread_id, "owner": request.user_id}):
                    return None
                await guard(session, request.thread_id)
                async with self.db.sqlite_writes(session) as writes:
                    return _open(writes, request)
        except RolledBack as rolled_back:
            return rolled_back.refused

    async def open_in(self, session: AsyncSession, request: OpeningRequest
                      ) -> Opened | Refused | None:
        try:
            async with self.db.sqlite_writes(session) as writes:
                return _open(writes, request)
        except RolledBack as rolled_back:
            return rolled_back.refused

    async def finish(self, finished: FinishedMessage,
                     hook: FinishHook | None = None) -> FinishedRow:
        if hook is None:
            async with self.db.sqlite_writes() as writes:
                return _finish(writes, finished, self.rollup_shards.take())
        async with self.db.transaction(quick=True) as session:
            async with self.db.sqlite_writes(session) as writes:
                row = _finish(writes, finished, self.rollup_shards.take())
            await hook(session, row)
            return row

    async def open_call(self, opening: CallOpening) -> Refused | None:
        async with self.db.sqlite_writes() as writes:
            refused = _refusal(writes, opening.user_id, opening.stream_cap, opening.budget,
                               opening.call_id)
            if refused is None:
                writes.run(_INSERT_OPEN_CALL, open_call_params(opening, utcnow()))
            return refused

    async def bill(self, user_id: str, calls: Sequence[CallRecord],
                   open_call: uuid.UUID | None = None) -> None:
        if not calls and open_call is None:
            return
        async with self.db.sqlite_writes() as writes:
            _record(writes, calls, user_id, utcnow(), self.rollup_shards.take())
            if open_call is not None:
                writes.run(_DELETE_OPEN_CALL, {"open_call": open_call})

    async def bill_swept(self, session: AsyncSession, swept: Sequence[SweptAnswer]) -> None:
        now = utcnow()
        async with self.db.sqlite_writes(session) as writes:
            for answer in swept:
                _record(writes, answer.calls, answer.user_id, now, self.rollup_shards.take(),
                        message_id=answer.message_id, thread_id=answer.thread_id)


def _open(writes: SqliteWrites, request: OpeningRequest) -> Opened | None:
    """The opening's statements. None for a missing or foreign thread; raises RolledBack
    for a refusal, ContentTooLong or ThreadBusy."""
    found = writes.rows(_OPEN_THREAD, {"thread_id": request.thread_id,
                                       "owner": request.user_id, "now": utcnow(),
                                       "chosen_model": request.model})
    if not found:
        return None
    [row] = found
    if request.fork is not None:
        writes.run(_BRANCH_TO, {"branch_thread": request.thread_id,
                                "branch_end": request.fork.parent})
        row = {**row, "branch_tip": request.fork.parent}
    history = ([(r["role"], r["content"], r["created_at"]) for r in reversed(writes.rows(
        _history(request.history_limit), {"context_of": request.thread_id}))]
        if request.history_limit else [])
    user_at, assistant_at = turn_times(utcnow(), row["newest_message_at"],
                                       with_user=request.content is not None)
    user, assistant = new_rows(request, user_at, assistant_at, row["branch_tip"])
    with busy_on_conflict(request.thread_id):
        writes.run_many(_INSERT_MESSAGE, [inserted_values(values)
                                          for values in (user, assistant) if values])
    if request.cancels_followups:
        writes.run(_CANCEL_FOLLOWUPS, {"of_thread": request.thread_id, "now": utcnow()})
    if (refused := _refusal(writes, request.user_id, request.stream_cap, request.budget,
                            assistant["id"])) is not None:
        raise RolledBack(refused)
    return Opened(unattached(Thread, row), detached(Message, user) if user else None,
                  detached(Message, assistant), history)


def _refusal(writes: SqliteWrites, user_id: str, stream_cap: int | None,
             budget: DayBudget | None, new_id: uuid.UUID) -> Refused | None:
    """What refuses a new stream of the user's (a turn's rows, already in; an open call's,
    not yet): the budget, then the cap over the user's streams but `new_id`; None when
    both admit it."""
    spent = others = None
    if budget is not None:
        figures = writes.rows(_SPENT_ON_DAY, {"owner": user_id, "budget_day": budget.day})[0]
        spent = (int(figures["tokens"]), float(figures["cost"]))
    if stream_cap is not None:
        others = int(writes.scalar(_COUNT_OTHER_STREAMS, {"user_id": user_id,
                                                          "except_id": new_id}))
    refused = Refused(spent, others)
    if refused.over_budget(budget) or (others is not None and stream_cap is not None
                                       and others >= stream_cap):
        return refused
    return None


def _finish(writes: SqliteWrites, finished: FinishedMessage, shard: int) -> FinishedRow:
    """The answer stored as finished, its calls and the day's rollup. Raises MessageNotFound
    or MessageAlreadyFinished; the transaction then stores nothing."""
    params = finish_params(finished)
    touched = writes.rows(_TOUCH_THREAD, params)
    stored = writes.rows(_FINISH_MESSAGE, params)
    if not stored:
        found = writes.scalar(_MESSAGE_EXISTS, params) is not None
        raise not_finished(finished.message_id, found=found)
    message = unattached(Message, stored[0])
    _record(writes, finished.llm_calls, message.user_id, params["now"], shard,
            message_id=message.id, thread_id=message.thread_id)
    return FinishedRow(message, (touched[0]["autonomy"] if touched else None) or {})


def _record(writes: SqliteWrites, calls: Sequence[CallRecord], user_id: str,
            now: dt.datetime, shard: int, *, message_id: uuid.UUID | None = None,
            thread_id: uuid.UUID | None = None) -> None:
    """One llm_calls row per call and the day's rollup (its `shard`), one upsert per model;
    the message's id and its thread's, None for calls without a message."""
    if calls:
        writes.run_many(_INSERT_CALL, call_rows(
            calls, user_id, now, message_id=message_id, thread_id=thread_id))
    for values in turn_rollup_values(utc_day(now), calls, shard):
        writes.run(_ADD_TO_ROLLUP, {"user_id": user_id, **values})

