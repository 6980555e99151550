"""PostgreSQL: a turn's opening, its finish and a bill without a message, each ONE statement.

Each round trip costs CPU in the driver and, under load, waits for passes of the busy event
loop; a statement is atomic on its own. So the opening (the thread's UPDATE, which locks it
and moves it to the top; the history the model is shown; the turn's rows; the cancel of the
thread's follow-ups; the count of the user's other streams under the user's lock; the day's
usage for a budget) is one statement, and so is the finish (the thread's UPDATE, the
message's, its calls, the day's rollup). Both run in autocommit
(Database.one_statement), or, when a guard or a hook must read or write in the same
transaction, as a statement of that transaction.

One snapshot serves a whole statement, taken as it starts. An answer whose finish commits
while the opening's UPDATE waits for the thread's lock would be missing from that
snapshot's history. Every transaction that writes a thread's messages updates the thread's
row first, so the UPDATE asks for the very row version the snapshot saw (its `xmin`): a
newer version leaves the thread unopened and the statement stores nothing (`changed`); the
opening then runs again in a transaction that locks the thread first, where its snapshot is
taken under the lock."""

from __future__ import annotations

import datetime as dt
import functools
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from sqlalchemy import (
    BindParameter,
    ColumnElement,
    Integer,
    Interval,
    Numeric,
    String,
    bindparam,
    exists,
    func,
    insert,
    literal,
    literal_column,
    null,
    or_,
    select,
    true,
)
from sqlalchemy.dialects import postgresql
from sqlalchemy.dialects.postgresql import aggregate_order_by
from sqlalchemy.ext.asyncio import AsyncSession

from app.answer.records import CallRecord, FinishedMessage
from app.core.clock import utcnow
from app.keys.limits_repository import other_streams_counted
from app.observe.logging import get_logger
from app.store.db import Database, Runner
from app.store.driver_statements import DriverStatement
from app.store.models import Message, Thread, UserTokenUsage, detached, table_of, unattached
from app.store.ownership import by_key
from app.turn.rows.branches import move_branch
from app.turn.rows.contract import (
    FinishedRow,
    FinishHook,
    RolledBack,
    SweptAnswer,
    ThreadGuard,
)
from app.turn.rows.messages import context_select
from app.turn.rows.shapes import CallOpening, Opened, OpeningRequest, Refused
from app.turn.rows.statements import (
    CALLS,
    DELETE_OPEN_CALL,
    FINISH_MESSAGE,
    LOCK_OWNED_THREAD,
    MESSAGE_EXISTS,
    MESSAGES,
    OPEN_CALL_VALUES,
    OPEN_CALLS,
    THREADS,
    TOUCH_THREAD_OF_MESSAGE,
    budget_params,
    busy_on_conflict,
    call_values,
    cancel_pending_statement,
    finish_params,
    inserted_params,
    inserted_values,
    new_rows,
    not_finished,
    open_call_params,
    open_thread_update,
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

log = get_logger("store.turn_rows")

#: The row times the statement computes: after the thread's newest message.
_TIMED = ("created_at", "updated_at", "completed_at")
_TICK = literal(dt.timedelta(microseconds=1), Interval())
_THREAD_PREFIX = "thread_"
Outcome = Opened | Refused | None | Literal["changed"]
_LOCK_OWNED_THREAD = DriverStatement(LOCK_OWNED_THREAD)


class PostgresTurnRows(AnswerThreads):
    """The turn's repository on PostgreSQL (app.turn.rows.TurnRows), adding usage to the
    rollup's `rollup_shards` in turn."""

    def __init__(self, db: Database, rollup_shards: RollupShards) -> None:
        self.db = db
        self.rollup_shards = rollup_shards

    async def open(self, request: OpeningRequest, guard: ThreadGuard | None = None
                   ) -> Opened | Refused | None:
        if guard is None and request.fork is None:
            async with self.db.one_statement() as connection:
                outcome = await _open(connection, request)
            if outcome != "changed":
                return outcome
            log.info("turn_opening_retried", thread_id=str(request.thread_id))
        try:
            async with self.db.transaction(quick=True) as session:
                return await self._open_locked(session, request, guard)
        except RolledBack as rolled_back:
            return rolled_back.refused

    async def open_in(self, session: AsyncSession, request: OpeningRequest
                      ) -> Opened | Refused | None:
        """The opening as a statement of the caller's transaction (the start-up check,
        which rolls it back)."""
        try:
            return await self._open_locked(session, request, None)
        except RolledBack as rolled_back:
            return rolled_back.refused

    async def _open_locked(self, session: AsyncSession, request: OpeningRequest,
                           guard: ThreadGuard | None) -> Opened | Refused | None:
        """The thread locked first, then the guard, then a fork's move of the branch, then
        the statement, whose snapshot then holds every answer of the thread. A refusal
        raises RolledBack: the thread's UPDATE and what the guard and the fork wrote are
        rolled back with it."""
        locked = await _LOCK_OWNED_THREAD.rows(
            session, {"thread_id": request.thread_id, "owner": request.user_id})
        if not locked:
            return None
        if guard is not None:
            await guard(session, request.thread_id)
        if request.fork is not None:
            await move_branch(session, request.thread_id, request.fork.parent)
        outcome = await _open(session, request)
        if outcome == "changed":
            raise RuntimeError("a locked thread changed under its opening")
        if isinstance(outcome, Refused):
            raise RolledBack(outcome)
        return outcome

    async def finish(self, finished: FinishedMessage,
                     hook: FinishHook | None = None) -> FinishedRow:
        if hook is None:
            async with self.db.one_statement() as connection:
                return await _finish(connection, finished, self.rollup_shards.take())
        async with self.db.transaction(quick=True) as session:
            row = await _finish(session, finished, self.rollup_shards.take())
            await hook(session, row)
            return row

    async def open_call(self, opening: CallOpening) -> Refused | None:
        capped, budgeted = opening.stream_cap is not None, opening.budget is not None
        async with self.db.one_statement() as connection:
            [row] = await _open_call_statement(capped, budgeted).rows(
                connection, open_call_params(opening, utcnow()))
        if row["opened"] is not None:
            return None
        return Refused((int(row["spent_tokens"]), float(row["spent_cost"])) if budgeted
                       else None, int(row["others"]) if capped else None)

    async def bill(self, user_id: str, calls: Sequence[CallRecord],
                   open_call: uuid.UUID | None = None) -> None:
        if not calls and open_call is None:
            return
        async with self.db.one_statement() as connection:
            await _bill(connection, user_id, calls, self.rollup_shards.take(),
                        open_call=open_call)

    async def bill_swept(self, session: AsyncSession, swept: Sequence[SweptAnswer]) -> None:
        for answer in swept:
            if answer.calls:
                await _bill(session, answer.user_id, answer.calls, self.rollup_shards.take(),
                            message_id=answer.message_id, thread_id=answer.thread_id)


async def _open(runner: Runner, request: OpeningRequest) -> Outcome:
    """The opening's one statement on `runner`. Raises ContentTooLong before it, ThreadBusy
    when the thread already streams."""
    now = utcnow()
    with_user = request.content is not None
    params: dict[str, Any] = {
        "opening_thread": request.thread_id, "owner": request.user_id, "now": now,
        "chosen_model": request.model, "of_thread": request.thread_id,
        "context_of": request.thread_id,
        "stream_cap": request.stream_cap}
    # `now` for both rows: the statement gives them their times (_times)
    user, assistant = new_rows(request, now, now)
    if user is not None:
        params |= inserted_values(user, "new_user_")
    params |= inserted_values(assistant, "new_assistant_")
    params |= budget_params(request.budget)
    statement = _statement(request.history_limit, request.stream_cap is not None,
                           request.budget is not None, with_user, request.cancels_followups)
    with busy_on_conflict(request.thread_id):
        rows = await statement.rows(runner, params)
    return _outcome(rows, request, user, assistant)


def _outcome(rows: list[dict[str, Any]], request: OpeningRequest,
             user: Mapping[str, Any] | None, assistant: Mapping[str, Any]) -> Outcome:
    if not rows:
        return None
    [first] = rows
    if first[_THREAD_PREFIX + "id"] is None:
        return "changed"
    if first["assistant_at"] is None:
        spent = ((int(first["spent_tokens"]), float(first["spent_cost"]))
                 if request.budget is not None else None)
        others = int(first["others"]) if request.stream_cap is not None else None
        return Refused(spent, others)
    history = list(zip(first["roles"] or (), first["contents"] or (), first["times"] or (),
                       strict=True))
    stored_user = (_stored(user, first["user_at"], completed=True) if user is not None
                   else None)
    return Opened(unattached(Thread, first, _THREAD_PREFIX), stored_user,
                  _stored(assistant, first["assistant_at"], completed=False), history)


def _stored(values: Mapping[str, Any], at: dt.datetime, *, completed: bool) -> Message:
    """A row the statement stored, with the times it gave the row."""
    times: dict[str, dt.datetime | None] = dict.fromkeys(_TIMED, at)
    if not completed:
        times["completed_at"] = None
    return detached(Message, {**values, **times})


@functools.cache
def _statement(limit: int, capped: bool, budgeted: bool, with_user: bool, cancels: bool
               ) -> DriverStatement:
    """The opening, built once per history limit and shape. Its CTEs: `found` (the
    thread's row by its key alone, with its version), `seen` (that version in the snapshot,
    if the user owns it; none for a missing or foreign thread: no row comes back), `opened`
    (the UPDATE, of that version only), `counted` (the user's lock and count, MATERIALIZED
    and read from `opened`, so it runs once and after the thread's lock, in the order every
    opening takes them), `spent` (the day's usage), `times`, the INSERTs (each from
    `opened`, so nothing is stored in a thread left unopened, and only under the cap and the
    budget), `cancelled` (once the user's row is in) and `history`. One row comes back, or
    none for a missing or foreign thread. No parameter is named as a column of a table the
    statement writes: SQLAlchemy would take it for a value set."""
    found = by_key(THREADS, _thread_param(), "found",
                   literal_column("threads.xmin").label("version"))
    seen = (select(found.c.version)
            .where(found.c.user_id == bindparam("owner", type_=THREADS.c.user_id.type))
            .cte("seen"))
    opened = (open_thread_update(_thread_param(), owned=False)
              .where(literal_column("threads.xmin") == select(seen.c.version).scalar_subquery())
              .cte("opened"))
    counted = (other_streams_counted(opened.c.user_id, bindparam(
        "new_assistant_id", type_=MESSAGES.c.id.type)) if capped else None)
    spent = SPENT_ON_DAY.cte("spent") if budgeted else None
    times = _times(opened, with_user)
    admitted = _admitted(counted, spent)
    new_user = (_insert("user", times.c.user_at, times, admitted, with_user=True)
                if with_user else None)
    new_assistant = _insert("assistant", times.c.assistant_at, times, admitted,
                            with_user=with_user)
    joined = seen.outerjoin(opened, true())
    for part in (counted, spent, new_user, new_assistant):
        if part is not None:
            joined = joined.outerjoin(part, true())
    history = _history(limit) if limit else None
    if history is not None:
        joined = joined.outerjoin(history, new_assistant.c.created_at.is_not(None))
    statement = select(
        *(opened.c[column.name].label(_THREAD_PREFIX + column.name) for column in THREADS.c),
        (counted.c.others if counted is not None else null()).label("others"),
        (spent.c.tokens if spent is not None else null()).label("spent_tokens"),
        (spent.c.cost if spent is not None else null()).label("spent_cost"),
        (new_user.c.created_at if new_user is not None else null()).label("user_at"),
        new_assistant.c.created_at.label("assistant_at"),
        *((history.c.roles, history.c.contents, history.c.times) if history is not None
          else (null().label("roles"), null().label("contents"), null().label("times"))),
    ).select_from(joined)
    if cancels and new_user is not None:
        cancelled = cancel_pending_statement(True).where(select(new_user.c.created_at).exists())
        statement = statement.add_cte(cancelled.cte("cancelled"))
    return DriverStatement(statement)


def _admitted(counted: Any | None, spent: Any | None) -> list[tuple[Any, Any]]:
    """The checks the INSERTs wait on: each a CTE to join and the condition it must meet."""
    checks: list[tuple[Any, Any]] = []
    if counted is not None:
        checks.append((counted, counted.c.others < bindparam("stream_cap", type_=Integer())))
    if spent is not None:
        tokens = bindparam("token_budget", type_=Integer())
        cost = bindparam("cost_budget", type_=Numeric(asdecimal=False))
        checks.append((spent, (or_(tokens.is_(None), spent.c.tokens < tokens))
                       & or_(cost.is_(None), spent.c.cost < cost)))
    return checks


def _history(limit: int) -> Any:
    """The history as three arrays of one row (roles, contents, times), oldest first; NULL
    arrays when the thread has none. A row per message would repeat the thread's columns
    with each, and a long thread's history is hundreds of messages."""
    m = MESSAGES.c
    newest = context_select(limit, m.role, m.content, m.created_at, m.id).subquery("newest")
    oldest_first = (newest.c.created_at, newest.c.id)
    return select(*(func.array_agg(aggregate_order_by(newest.c[name], *oldest_first)).label(label)
                    for name, label in (("role", "roles"), ("content", "contents"),
                                        ("created_at", "times")))).cte("history")


def _thread_param() -> BindParameter[Any]:
    return bindparam("opening_thread", type_=THREADS.c.id.type)


def _times(opened: Any, with_user: bool) -> Any:
    """The new rows' times as app.turn.rows.shapes.turn_times computes them: now, or
    just after the newest message as the snapshot holds it; the answer's just after the
    user's."""
    first_at = func.greatest(bindparam("now", type_=MESSAGES.c.created_at.type),
                             opened.c.newest_message_at + _TICK)
    columns = ([first_at.label("user_at"), (first_at + _TICK).label("assistant_at")]
               if with_user else [first_at.label("assistant_at")])
    columns.append(opened.c.branch_tip)
    return select(*columns).select_from(opened).cte("times")


def _insert(who: str, at: Any, times: Any, admitted: list[tuple[Any, Any]], *,
            with_user: bool) -> Any:
    """One row's INSERT from `times`, so only in an opened thread, and only where every
    check admits it."""
    values: dict[str, Any] = inserted_params(f"new_{who}_")
    values |= dict.fromkeys(_TIMED, at)
    # the user message follows the branch's newest message, the answer the user message
    values["parent_id"] = (bindparam("new_user_id", type_=MESSAGES.c.id.type)
                           if who == "assistant" and with_user else times.c.branch_tip)
    if who == "assistant":
        values["completed_at"] = null()
    source = select(*values.values()).select_from(times)
    for part, condition in admitted:
        source = source.join(part, true()).where(condition)
    return (insert(MESSAGES).from_select(list(values), source)
            .returning(MESSAGES.c.created_at).cte(f"new_{who}"))


async def _finish(runner: Runner, finished: FinishedMessage, shard: int) -> FinishedRow:
    """The finish's one statement, its usage added to the rollup's `shard`. Raises
    MessageNotFound (its thread was deleted) or MessageAlreadyFinished (its usage must not be
    counted twice), having stored nothing."""
    params = finish_params(finished)
    calls = finished.llm_calls
    rollups = turn_rollup_values(utc_day(params["now"]), calls, shard)
    values = dict(params) | _recorded_values(calls, params["now"], rollups)
    rows = await _finish_statement(len(calls), len(rollups)).rows(runner, values)
    if not rows:
        found = await DriverStatement(MESSAGE_EXISTS).rows(runner, params)
        raise not_finished(finished.message_id, found=bool(found))
    return FinishedRow(unattached(Message, rows[0]), rows[0]["thread_autonomy"] or {})


@functools.lru_cache(maxsize=64)
def _finish_statement(calls: int, models: int) -> DriverStatement:
    """The finish, built once per count of calls and of models: the thread's UPDATE, then
    the message's, which waits for it (an EXISTS on it), so the thread's row is locked
    before the message's as in every transaction that writes a thread's messages; the calls
    and the rollup read the finished message, so nothing is recorded for a message missing
    or finished already. No NOTIFY: the events bus sends its own after the commit
    (app.store.notify says why)."""
    touched = TOUCH_THREAD_OF_MESSAGE.cte("touched")
    finished = FINISH_MESSAGE.where(exists().select_from(touched)).cte("finished")
    autonomy = select(touched.c.autonomy).scalar_subquery().label("thread_autonomy")
    source = {"message_id": finished.c.id, "thread_id": finished.c.thread_id,
              "user_id": finished.c.user_id}
    return DriverStatement(_recorded(select(autonomy, finished), source,
                                     finished.c.user_id, calls, models))


async def _bill(runner: Runner, user_id: str, calls: Sequence[CallRecord], shard: int, *,
                message_id: uuid.UUID | None = None, thread_id: uuid.UUID | None = None,
                open_call: uuid.UUID | None = None) -> None:
    """Calls recorded as a finish records a message's: their llm_calls rows (with the
    message and thread given; none for calls that belong to no message, as a deleted thread
    leaves its older calls) and the user's rollup, and the open call they were made under
    deleted, in one statement."""
    now = utcnow()
    rollups = turn_rollup_values(utc_day(now), calls, shard)
    values = {"bill_user": user_id, "bill_message": message_id, "bill_thread": thread_id,
              "open_call": open_call, **_recorded_values(calls, now, rollups)}
    await _bill_statement(len(calls), len(rollups), open_call is not None).rows(runner, values)


@functools.lru_cache(maxsize=32)
def _bill_statement(calls: int, models: int, closes: bool) -> DriverStatement:
    """_bill's statement, built once per count of calls and of models, and with the open
    call's DELETE or without."""
    user = bindparam("bill_user", type_=String())
    source = {"message_id": bindparam("bill_message", type_=CALLS.c.message_id.type),
              "thread_id": bindparam("bill_thread", type_=CALLS.c.thread_id.type),
              "user_id": user}
    statement = _recorded(select(literal(1).label("billed")), source, user, calls, models)
    if closes:
        statement = statement.add_cte(DELETE_OPEN_CALL.cte("closed"))
    return DriverStatement(statement)


@functools.cache
def _open_call_statement(capped: bool, budgeted: bool) -> DriverStatement:
    """An open call's opening, built once per shape: `counted` (the user's lock and their
    other streams, as a turn's opening counts them), `spent` (the day's usage), and the
    row's INSERT only where both admit it. One row comes back: the figures, and `opened`
    (the new row's id, NULL when refused)."""
    counted = (other_streams_counted(OPEN_CALL_VALUES["user_id"], OPEN_CALL_VALUES["id"])
               if capped else None)
    spent = SPENT_ON_DAY.cte("spent") if budgeted else None
    checks = _admitted(counted, spent)
    source = select(*OPEN_CALL_VALUES.values())
    if checks:  # single-row CTEs: their cross join is one row, or none when refused
        source = (source.select_from(*(part for part, _ in checks))
                  .where(*(condition for _, condition in checks)))
    inserted = (insert(OPEN_CALLS).from_select(list(OPEN_CALL_VALUES), source)
                .returning(OPEN_CALLS.c.id).cte("inserted"))
    joined: Any = inserted
    if checks:
        joined = checks[0][0]
        for part, _ in checks[1:]:
            joined = joined.join(part, true())
        joined = joined.outerjoin(inserted, true())
    return DriverStatement(select(
        (counted.c.others if counted is not None else null()).label("others"),
        (spent.c.tokens if spent is not None else null()).label("spent_tokens"),
        (spent.c.cost if spent is not None else null()).label("spent_cost"),
        inserted.c.id.label("opened")).select_from(joined))


def _recorded(statement: Any, source: Mapping[str, Any], user_id: Any, calls: int,
              models: int) -> Any:
    """`statement` with each call's llm_calls INSERT and each model's rollup upsert as a
    data-modifying CTE: the message, thread and user of each from `source`."""
    for k in range(calls):
        values = [source[column.name] if column.name in source
                  else bindparam(f"call{k}_{column.name}", type_=column.type)
                  for column in CALLS.c]
        inserted = insert(CALLS).from_select(list(CALLS.c), select(*values))
        statement = statement.add_cte(inserted.cte(f"call{k}"))
    for k in range(models):
        statement = statement.add_cte(rollup_upsert_of(user_id, f"usage{k}_").cte(f"usage{k}"))
    return statement


def rollup_upsert_of(user_id: ColumnElement[str], prefix: str) -> postgresql.Insert:
    """The rollup's upsert as INSERT ... SELECT, for a data-modifying CTE: the user is
    `user_id`, a column of the CTE it depends on (no row there, nothing added), and every
    other value a parameter named `prefix` + its column, as turn_rollup_values gives them."""
    table = table_of(UserTokenUsage)
    values = [bindparam(prefix + name, type_=table.c[name].type) for name in ROLLUP_COLUMNS[1:]]
    return adding_on_conflict(
        postgresql.insert(table).from_select(ROLLUP_COLUMNS, select(user_id, *values)))


def _recorded_values(calls: Sequence[CallRecord], now: dt.datetime,
                     rollups: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The parameters of _recorded's CTEs: the calls' and the rollup upserts' (one a model,
    turn_rollup_values)."""
    values: dict[str, Any] = {}
    for k, call in enumerate(calls):
        values |= {f"call{k}_{column}": value for column, value in call_values(call, now).items()}
    for k, rollup in enumerate(rollups):
        values |= {f"usage{k}_{column}": value for column, value in rollup.items()}
    return values
