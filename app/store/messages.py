"""Messages: the turn lifecycle (user message, streaming assistant message, finish) and the two
histories (what the user sees, what the model sees)."""

from __future__ import annotations

import datetime as dt
import functools
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    BindParameter,
    Select,
    String,
    and_,
    bindparam,
    exists,
    func,
    insert,
    not_,
    select,
    true,
    update,
)
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from app.clock import utcnow
from app.records import CallRecord, FinishedMessage
from app.store.db import Runner, dialect_of, session_of
from app.store.driver_statements import DriverStatement
from app.store.errors import ContentTooLong, MessageAlreadyFinished, MessageNotFound, ThreadBusy
from app.store.followups import cancel_pending_for_thread, cancel_pending_statement
from app.store.limits import other_streams_counted
from app.store.models import LlmCall, Message, Thread, detached, table_of, unattached
from app.store.notify import Notification
from app.store.ownership import owned_id
from app.store.sanitize import clean_message
from app.store.threads import OpenedThread, touch_thread
from app.store.usage import record_turn_usage, rollup_upsert_of, turn_rollup_values, utc_day
from app.store.visibility import visible_sql
from app.synthetic import real_user_metadata

# The default limit on a user message, in characters (Settings.max_content_chars has the same
# default; the API passes the configured value).
MAX_CONTENT_CHARS = 32_000
STREAMING_INDEX = "uq_messages_one_streaming_per_thread"
#: The tables, for the Core statements of a turn's opening and finish.
_MESSAGES, _THREADS = table_of(Message), table_of(Thread)


async def _next_created_at(s: AsyncSession, thread_id: uuid.UUID) -> dt.datetime:
    """Now, or just after the thread's newest message: order by created_at is turn order even
    when clocks of several processes disagree or two writes share a microsecond."""
    return time_after(await s.scalar(
        select(func.max(Message.created_at)).where(Message.thread_id == thread_id)))


def time_after(newest: dt.datetime | None) -> dt.datetime:
    """Now, or just after `newest` when the clock has not passed it."""
    now = utcnow()
    if newest is not None and now <= newest:
        return newest + dt.timedelta(microseconds=1)
    return now


def check_length(content: str, max_chars: int = MAX_CONTENT_CHARS) -> None:
    """Refuse over-long content before it reaches the database."""
    if len(content) > max_chars:
        raise ContentTooLong(len(content), max_chars)


async def append_user_message(
    s: AsyncSession, thread: Thread, content: str, *, synthetic: bool = False,
    trigger_type: str | None = None, trigger_reason: str | None = None,
    max_chars: int = MAX_CONTENT_CHARS,
) -> Message:
    """Store a user message. Only the server makes synthetic messages, and only a literal
    `synthetic=True` does. A real message cancels the thread's pending and claimed
    follow-ups in the caller's transaction."""
    message = Message(**user_values(thread.id, thread.user_id, content, synthetic=synthetic,
                                    trigger_type=trigger_type, trigger_reason=trigger_reason,
                                    max_chars=max_chars,
                                    now=await _next_created_at(s, thread.id)))
    s.add(message)
    await s.flush()
    await _after_user_message(s, thread.id, synthetic=message.synthetic)
    return message


@dataclass(frozen=True, slots=True)
class OpenedExchange:
    """A turn's two new rows, and the history the model is shown (context_rows' rows, read
    before the two were stored; empty unless asked for)."""

    user: Message
    assistant: Message
    history: list[tuple[str, str, dt.datetime]]
    #: The user's other streaming answers, counted under the user's lock by the opening's
    #: statement (`count_streams`); None when it did not count them.
    other_streams: int | None = None


async def open_exchange(
    s: AsyncSession, opened: OpenedThread, content: str, *, history_limit: int = 0,
    synthetic: bool = False, trigger_type: str | None = None,
    trigger_reason: str | None = None, max_chars: int = MAX_CONTENT_CHARS,
    process_id: str | None = None, count_streams: bool = False,
) -> OpenedExchange:
    """A turn's two rows, stored together: the user message (as append_user_message) and the
    assistant message, `streaming` and empty, just after it (as open_assistant_message); a
    real message cancels the thread's follow-ups. With `history_limit`, first the newest
    messages the model may see (context_rows). Raises ContentTooLong, or ThreadBusy when the
    thread already streams; either ends the caller's transaction, which stores nothing of the
    turn. The rows are inserted as plain values (no savepoint, no unit of work: this runs
    once per turn) and returned unattached. `opened` (threads.open_for_turn) moved the thread
    to the top already and holds its lock.

    On PostgreSQL the history, the insert and the cancel are ONE statement (each statement
    is a round trip, and under load every round trip waits for passes of the event loop);
    on SQLite, whose statements make no trip in a quick transaction, three. On PostgreSQL
    with `count_streams`, that statement also takes the user's stream lock, held to the
    commit, and counts the user's other streaming answers under it (`other_streams`: what
    the turn limits' lock_user_and_count_streaming, a round trip more, would give, less the
    new row); otherwise the caller counts."""
    thread = opened.thread
    user = user_values(thread.id, thread.user_id, content, synthetic=synthetic,
                       trigger_type=trigger_type, trigger_reason=trigger_reason,
                       max_chars=max_chars, now=time_after(opened.newest_message_at))
    assistant = assistant_values(thread.id, thread.user_id, time_after(user["created_at"]),
                                 process_id)
    if history_limit and s.get_bind().dialect.name == "postgresql":
        return await _history_then_exchange(s, user, assistant, history_limit, count_streams)
    history = (await context_rows(s, thread.id, limit=history_limit) if history_limit
               else [])
    with busy_on_conflict(thread.id):
        await s.execute(_INSERT_MESSAGES, [inserted_values(user), inserted_values(assistant)])
    await _cancel_followups_if_real(s, thread.id, synthetic=user["synthetic"])
    return OpenedExchange(detached(Message, user), detached(Message, assistant), history)


async def _history_then_exchange(s: AsyncSession, user: Mapping[str, Any],
                                 assistant: Mapping[str, Any], limit: int, count: bool
                                 ) -> OpenedExchange:
    """PostgreSQL: context_rows, the INSERT, the cancel and (`count`) the user's other
    streams of open_exchange as its one statement (_one_statement_opening)."""
    cancel = not user["synthetic"]
    params = {"context_of": user["thread_id"], **inserted_values(user, "new_user_"),
              **inserted_values(assistant, "new_assistant_")}
    if cancel:
        params |= {"of_thread": user["thread_id"], "now": utcnow()}
    with busy_on_conflict(user["thread_id"]):
        rows = (await s.execute(_one_statement_opening(limit, cancel, count), params)).all()
    others = int(rows[0].others) if count else None
    history = [(row.role, row.content, row.created_at) for row in reversed(rows)
               if row.role is not None]  # a thread without history: the count's row alone
    return OpenedExchange(detached(Message, user), detached(Message, assistant), history,
                          others)


@contextmanager
def busy_on_conflict(thread_id: uuid.UUID) -> Iterator[None]:
    """The one-streaming-message-per-thread index refusing a row, raised as ThreadBusy."""
    try:
        yield
    except IntegrityError as error:
        if _is_streaming_conflict(error):
            raise ThreadBusy(f"thread {thread_id} already has a streaming message") from error
        raise


#: Built once, as every statement a turn runs: building costs more CPU than running.
_INSERT_MESSAGES = insert(_MESSAGES)

#: The columns a new row is inserted with (`tokens` is computed by the database), each with
#: the Message attribute it comes from.
INSERTED_COLUMNS = {
    "id": "id", "thread_id": "thread_id", "user_id": "user_id", "role": "role",
    "content": "content", "metadata": "meta", "status": "status", "synthetic": "synthetic",
    "trigger_type": "trigger_type", "created_at": "created_at", "updated_at": "updated_at",
    "completed_at": "completed_at", "stream_process": "stream_process"}


def inserted_values(values: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """A new row's columns as an INSERT takes them, each named `prefix` + its column, from
    its attributes' values (user_values, assistant_values)."""
    return {prefix + column: values[attribute]
            for column, attribute in INSERTED_COLUMNS.items()}


def inserted_params(prefix: str) -> dict[str, BindParameter[Any]]:
    """A parameter for each column a new row is inserted with, named as inserted_values
    names its value."""
    return {column: bindparam(prefix + column, type_=_MESSAGES.c[column].type)
            for column in INSERTED_COLUMNS}


@functools.cache
def _one_statement_opening(limit: int, cancel: bool, count: bool) -> Select[Any]:
    """PostgreSQL's opening as one statement, built once per limit and kind: the history as
    context_rows reads it, with the two rows' INSERTs and (`cancel`) the follow-ups' UPDATE
    as data-modifying CTEs, which run to completion though nothing reads them. All three
    see one snapshot, taken as the statement starts: after open_for_turn's lock, so the
    history holds every answer finished before this turn (as a statement of its own did),
    and not the turn's own rows. `count`: a MATERIALIZED CTE, run once, takes the user's
    stream lock and counts the other streams, its value joined to every history row (one
    row of it alone when there is no history). No parameter is named as a column of either
    table: SQLAlchemy would take it for a value the UPDATE (or the INSERT) sets."""
    m = _MESSAGES.c
    history = context_select(limit, m.role, m.content, m.created_at, m.id).cte("history")
    columns = (history.c.role, history.c.content, history.c.created_at)
    statement = select(*columns)
    if count:
        counted = other_streams_counted(
            bindparam("new_assistant_user_id", type_=m.user_id.type),
            bindparam("new_assistant_id", type_=m.id.type))
        statement = (select(counted.c.others, *columns)
                     .select_from(counted.outerjoin(history, true())))
    statement = statement.order_by(history.c.created_at.desc(), history.c.id.desc())
    for who in ("user", "assistant"):  # two INSERTs: SQLAlchemy caches no multi-row VALUES
        row = inserted_params(f"new_{who}_")
        statement = statement.add_cte(insert(_MESSAGES).values(row).cte(f"new_{who}"))
    if cancel:
        statement = statement.add_cte(cancel_pending_statement(True).cte("cancelled"))
    return statement


def user_values(
    thread_id: uuid.UUID, user_id: str, content: str, *, synthetic: bool, trigger_type: str | None,
    trigger_reason: str | None, max_chars: int, now: dt.datetime,
) -> dict[str, Any]:
    """A user message's row, checked and cleaned, as its attributes' values: a Message to add
    to a session, or, once a Core statement has stored it, a detached one."""
    check_length(content, max_chars)
    is_synthetic = synthetic is True
    if is_synthetic and not trigger_type:
        raise ValueError("a synthetic message needs a trigger_type")
    metadata: dict[str, Any] = (
        {"synthetic": True, "trigger_type": trigger_type, "trigger_reason": trigger_reason}
        if is_synthetic else {}
    )
    clean_content, clean_meta = clean_message(content, metadata)
    if not is_synthetic:
        clean_meta.update(real_user_metadata(clean_content))
    # Every column set, as on the assistant row: rows with the same columns share one INSERT.
    return {
        "id": uuid.uuid4(), "thread_id": thread_id, "user_id": user_id, "role": "user",
        "content": clean_content, "meta": clean_meta, "status": "complete",
        "synthetic": is_synthetic,
        "trigger_type": clean_meta.get("trigger_type") if is_synthetic else None,
        "created_at": now, "updated_at": now, "completed_at": now, "stream_process": None,
    }


def assistant_values(thread_id: uuid.UUID, user_id: str, now: dt.datetime,
                     process_id: str | None) -> dict[str, Any]:
    """A turn's assistant message's row, `streaming` and empty, as its attributes' values
    (as user_values)."""
    return {
        "id": uuid.uuid4(), "thread_id": thread_id, "user_id": user_id, "role": "assistant",
        "content": "", "meta": {}, "status": "streaming", "synthetic": False,
        "trigger_type": None, "created_at": now, "updated_at": now, "completed_at": None,
        "stream_process": process_id,
    }


async def _after_user_message(s: AsyncSession, thread_id: uuid.UUID, *, synthetic: bool
                              ) -> None:
    """A real message cancels the thread's follow-ups; any moves the thread to the top."""
    await _cancel_followups_if_real(s, thread_id, synthetic=synthetic)
    await touch_thread(s, thread_id)


async def _cancel_followups_if_real(s: AsyncSession, thread_id: uuid.UUID, *, synthetic: bool
                                    ) -> None:
    """The user wrote: the thread's follow-ups, claimed ones too, are no longer wanted."""
    if not synthetic:
        await cancel_pending_for_thread(s, thread_id, claimed_too=True)


def _is_streaming_conflict(error: IntegrityError) -> bool:
    text = str(error.orig)
    return STREAMING_INDEX in text or "UNIQUE constraint failed: messages.thread_id" in text


async def open_assistant_message(s: AsyncSession, thread: Thread, *,
                                 process_id: str | None = None) -> Message:
    """The assistant message of a turn, `streaming` and empty, ordered after the user message.
    `process_id`: the gateway process streaming it, so the row is swept soon after that
    process dies. Raises ThreadBusy when the thread already streams (the session stays
    usable: savepoint)."""
    message = Message(**assistant_values(thread.id, thread.user_id,
                                         await _next_created_at(s, thread.id), process_id))
    with busy_on_conflict(thread.id):
        async with s.begin_nested():
            s.add(message)
    return message


@dataclass(frozen=True, slots=True)
class FinishedRow:
    """A finished message as stored, and its thread's autonomy settings as the finish read
    them, under the thread's lock: as they are now, not as they were when the turn opened."""

    message: Message
    thread_autonomy: dict[str, Any]


#: A turn's finish, built once (building a statement costs more CPU than running it). The
#: thread row first, as open_turn locks it: one lock order for both transactions, so a
#: concurrent open (answered 409) cannot deadlock with a finish. It also moves the thread to
#: the top of the list, and reads its autonomy settings under the lock. A message finished
#: already touches nothing: a finish that runs without a transaction writes nothing for it.
TOUCH_THREAD_OF_MESSAGE = (
    update(_THREADS)
    .where(_THREADS.c.id == select(_MESSAGES.c.thread_id)
           .where(_MESSAGES.c.id == bindparam("message_id", type_=_MESSAGES.c.id.type),
                  _MESSAGES.c.completed_at.is_(None))
           .scalar_subquery())
    .values(updated_at=bindparam("now", type_=_THREADS.c.updated_at.type))
    .returning(_THREADS.c.autonomy)
)
FINISH_MESSAGE = (
    update(_MESSAGES)
    .where(_MESSAGES.c.id == bindparam("message_id", type_=_MESSAGES.c.id.type),
           _MESSAGES.c.completed_at.is_(None))
    .values({column: bindparam(f"new_{column}", type_=_MESSAGES.c[column].type)
             for column in ("content", "metadata", "status", "completed_at", "updated_at")})
    .returning(*_MESSAGES.c)
)


async def finish_assistant_message(s: Runner, finished: FinishedMessage,
                                   notifications: Sequence[Notification] = ()) -> FinishedRow:
    """Write the final content, metadata, status and completed_at, one llm_calls row per call,
    and the daily usage rollup, all in the caller's transaction (or, on PostgreSQL, in
    Database.one_statement's block). Finishing twice raises MessageAlreadyFinished (usage
    must not be counted twice).

    On PostgreSQL it is ONE statement (each is a round trip, and under load every round trip
    waits for passes of the event loop, while the thread's and the rollup's rows stay locked
    until the commit); it also sends `notifications`, only if it finished the message. On
    SQLite, whose statements make no trip in a quick transaction, one per write, and no
    NOTIFY (ValueError if asked for one)."""
    params = finish_params(finished)
    if dialect_of(s) == "postgresql":
        stored = await _finish_in_one_statement(s, finished.llm_calls, notifications, params)
    elif notifications:
        raise ValueError("NOTIFY is PostgreSQL's")
    else:
        stored = await _finish_then_record(session_of(s), finished.llm_calls, params)
    if stored is None:
        found = await s.scalar(select(exists().where(Message.id == finished.message_id)))
        raise not_finished(finished.message_id, found=bool(found))
    return stored


def not_finished(message_id: uuid.UUID, *, found: bool) -> MessageNotFound | MessageAlreadyFinished:
    """Why a finish stored nothing: the message is gone (its thread was deleted), or it was
    finished already (its usage must not be counted twice)."""
    if not found:
        return MessageNotFound(str(message_id))
    return MessageAlreadyFinished(str(message_id))


def finish_params(finished: FinishedMessage) -> dict[str, Any]:
    """The finish's parameters (TOUCH_THREAD_OF_MESSAGE's and FINISH_MESSAGE's): the text
    and metadata cleaned, the time now. Raises ValueError for a message still streaming."""
    if finished.status == "streaming":
        raise ValueError("a finished message cannot be streaming")
    content, metadata = clean_message(finished.content, finished.metadata)
    now = utcnow()
    return {"message_id": finished.message_id, "now": now, "new_content": content,
            "new_metadata": metadata, "new_status": finished.status,
            "new_completed_at": now, "new_updated_at": now}


async def _finish_then_record(s: AsyncSession, calls: Sequence[CallRecord],
                              params: dict[str, Any]) -> FinishedRow | None:
    """SQLite: the thread's UPDATE, the message's, then _record_calls; None when the message
    is missing or finished already."""
    autonomy = (await s.execute(TOUCH_THREAD_OF_MESSAGE, params)).scalar_one_or_none()
    row = (await s.execute(FINISH_MESSAGE, params)).one_or_none()
    if row is None:
        return None
    message = unattached(Message, row._mapping)
    await _record_calls(s, calls, message.user_id, params["now"],
                        message_id=message.id, thread_id=message.thread_id)
    return FinishedRow(message, autonomy or {})


async def _finish_in_one_statement(s: Runner, calls: Sequence[CallRecord],
                                   notifications: Sequence[Notification],
                                   params: dict[str, Any]) -> FinishedRow | None:
    """PostgreSQL: _finish_then_record and the NOTIFYs as one statement
    (_one_statement_finish)."""
    now, values = params["now"], dict(params)
    rollups = turn_rollup_values(utc_day(now), calls)
    for k, call in enumerate(calls):
        values |= {f"call{k}_{column}": value for column, value in _call_values(call, now).items()}
    for k, rollup in enumerate(rollups):
        values |= {f"usage{k}_{column}": value for column, value in rollup.items()}
    for k, notification in enumerate(notifications):
        values |= {f"notice{k}_channel": notification.channel,
                   f"notice{k}_payload": notification.payload}
    statement = _one_statement_finish(len(calls), len(rollups), len(notifications))
    rows = await statement.rows(s, values)
    if not rows:
        return None
    return FinishedRow(unattached(Message, rows[0]), rows[0]["thread_autonomy"] or {})


@functools.lru_cache(maxsize=64)
def _one_statement_finish(calls: int, models: int, notices: int) -> DriverStatement:
    """PostgreSQL's finish as one statement, built once per count of calls, of models and of
    NOTIFYs: the thread's UPDATE, then the message's, which waits for it (an EXISTS on it),
    so the thread's row is locked before the message's as in every transaction that writes
    a thread's messages; each llm_calls row and each rollup upsert as a data-modifying CTE
    reading the finished message, so nothing is recorded for a message missing or finished
    already; each NOTIFY a column of the one row it returns, so none is sent without a
    finished message. No parameter is named as a column of a table it writes: SQLAlchemy
    would take it for a value to set."""
    touched = TOUCH_THREAD_OF_MESSAGE.cte("touched")
    finished = FINISH_MESSAGE.where(exists().select_from(touched)).cte("finished")
    autonomy = select(touched.c.autonomy).scalar_subquery().label("thread_autonomy")
    sent = [func.pg_notify(bindparam(f"notice{k}_channel", type_=String()),
                           bindparam(f"notice{k}_payload", type_=String())).label(f"notice{k}")
            for k in range(notices)]
    statement = select(autonomy, finished, *sent)
    from_message = {"message_id": finished.c.id, "thread_id": finished.c.thread_id,
                    "user_id": finished.c.user_id}
    for k in range(calls):
        values = [from_message[column.name] if column.name in from_message
                  else bindparam(f"call{k}_{column.name}", type_=column.type)
                  for column in _CALLS.c]
        inserted = insert(_CALLS).from_select(list(_CALLS.c), select(*values))
        statement = statement.add_cte(inserted.cte(f"call{k}"))
    for k in range(models):
        upsert = rollup_upsert_of(finished.c.user_id, f"usage{k}_")
        statement = statement.add_cte(upsert.cte(f"usage{k}"))
    return DriverStatement(statement)


async def record_calls_without_message(
    s: AsyncSession, user_id: str, calls: Sequence[CallRecord]
) -> None:
    """Record calls that belong to no message: their llm_calls rows and the rollup of the
    user, like any finished turn's, with no message or thread (as a deleted thread leaves its
    older calls). For an OpenAI-compatible call without a thread, and for a turn whose thread
    was deleted while it streamed: its upstream calls were made and paid for."""
    await _record_calls(s, calls, user_id, utcnow(), message_id=None, thread_id=None)


#: Built once: every finish runs it.
_CALLS = table_of(LlmCall)
_INSERT_CALLS = insert(_CALLS)
#: The same INSERT with a parameter for each column, named as the column (call_rows' keys):
#: as the driver's SQL (app.store.sqlite_turns).
INSERT_CALL = insert(_CALLS).values({column.name: bindparam(column.name, type_=column.type)
                                     for column in _CALLS.c})


def _call_values(call: CallRecord, now: dt.datetime) -> dict[str, Any]:
    """A call's llm_calls row but its message, thread and user."""
    return {
        "id": uuid.uuid4(), "stage": call.stage, "model": call.model,
        "prompt_tokens": call.prompt_tokens, "completion_tokens": call.completion_tokens,
        "total_tokens": call.total_tokens, "cost_usd": call.cost_usd,
        "usage_source": call.usage_source, "started_at": call.started_at,
        "first_token_at": call.first_token_at, "finished_at": call.finished_at,
        "duration_ms": call.duration_ms, "status": call.status, "error": call.error,
        "created_at": now,
    }


async def _record_calls(
    s: AsyncSession, calls: Sequence[CallRecord], user_id: str, now: dt.datetime, *,
    message_id: uuid.UUID | None, thread_id: uuid.UUID | None,
) -> None:
    """One llm_calls row per call (one Core INSERT: no ORM object per row, nothing for the
    unit of work to sort) and the day's rollup, in the caller's transaction."""
    if calls:
        await s.execute(_INSERT_CALLS, call_rows(calls, user_id, now, message_id=message_id,
                                                 thread_id=thread_id))
    await record_turn_usage(s, user_id=user_id, day=utc_day(now), calls=calls)


def call_rows(calls: Sequence[CallRecord], user_id: str, now: dt.datetime, *,
              message_id: uuid.UUID | None, thread_id: uuid.UUID | None
              ) -> list[dict[str, Any]]:
    """The llm_calls rows of a turn's calls, as INSERT_CALL takes them."""
    return [{"message_id": message_id, "thread_id": thread_id, "user_id": user_id,
             **_call_values(call, now)} for call in calls]


async def get_message(s: AsyncSession, user_id: str, message_id: uuid.UUID) -> Message | None:
    """One of the user's messages by id."""
    result = await s.execute(select(Message).where(
        Message.id == owned_id(_MESSAGES, message_id, user_id, "owned")))
    return result.scalar_one_or_none()


async def visible_history(
    s: AsyncSession, user_id: str, thread_id: uuid.UUID, *, include_synthetic: bool = False
) -> list[Message]:
    """The thread's messages in order, as the user sees them: synthetic and legacy follow-up
    prompts excluded unless include_synthetic (debugging). Another user's thread gives []."""
    query = select(Message).where(
        Message.thread_id == owned_id(_THREADS, thread_id, user_id, "owned"))
    if not include_synthetic:
        query = query.where(visible_sql())
    result = await s.execute(query.order_by(Message.created_at, Message.id))
    return list(result.scalars())


def context_select(limit: int, *columns: Any) -> Select[Any]:
    """The newest `limit` messages the model may see, newest first: rows still streaming,
    failed assistant rows and empty rows left out. For the thread of the `context_of`
    parameter."""
    m = _MESSAGES.c  # table columns: with plain columns selected, a Core statement
    failed_assistant = and_(m.role == "assistant", m.status == "failed")
    return (
        select(*columns)
        .where(m.thread_id == bindparam("context_of", type_=m.thread_id.type),
               m.status != "streaming", not_(failed_assistant), m.content != "")
        .order_by(m.created_at.desc(), m.id.desc())
        .limit(limit)
    )


async def context_history(s: AsyncSession, thread_id: uuid.UUID, *, limit: int) -> list[Message]:
    """What the model sees: the newest `limit` messages, oldest first, synthetic prompts
    included; rows still streaming, failed assistant rows and empty rows left out."""
    result = await s.execute(context_select(limit, Message), {"context_of": thread_id})
    return list(reversed(result.scalars().all()))


async def context_rows(s: AsyncSession, thread_id: uuid.UUID, *, limit: int
                       ) -> list[tuple[str, str, dt.datetime]]:
    """context_history as (role, content, created_at), oldest first: a turn needs no more,
    and plain rows of a Core query cost a fraction of ORM objects (a long thread has
    hundreds)."""
    result = await s.execute(context_rows_select(limit), {"context_of": thread_id})
    return [(role, content, at) for role, content, at in reversed(result.all())]


@functools.cache
def context_rows_select(limit: int) -> Select[Any]:
    """Built once per limit: every turn reads its context with it."""
    m = _MESSAGES.c
    return context_select(limit, m.role, m.content, m.created_at)


async def interrupt_stale_streaming(s: AsyncSession, older_than: dt.timedelta) -> int:
    """Rows left `streaming` longer than older_than (a dead process) become `interrupted`.
    completed_at stays NULL: the turn never finished, and a live-but-slow process may still
    finish it. Returns how many rows changed."""
    cutoff = utcnow() - older_than
    stale = await s.execute(
        select(Message)
        .where(Message.status == "streaming", Message.created_at < cutoff)
        .with_for_update(skip_locked=True)
    )
    return await mark_interrupted(s, stale.scalars(), reason="stale_streaming", now=utcnow())


async def checkpoint_contents(
    s: AsyncSession, contents: Mapping[uuid.UUID, str], *, now: dt.datetime
) -> None:
    """The partial text of streams still running, one executemany for all of them. Only
    rows still `streaming` are written: a finished (or swept) row is never overwritten by a
    checkpoint that lost the race. (No count: asyncpg's executemany reports none.)"""
    if not contents:
        return
    table = table_of(Message)
    statement = (
        update(table)
        .where(table.c.id == bindparam("mid"), table.c.status == "streaming")
        .values(content=bindparam("text"), updated_at=now)
    )
    await s.execute(statement, [{"mid": mid, "text": text} for mid, text in contents.items()])


async def mark_interrupted(
    s: AsyncSession, messages: Iterable[Message], *, reason: str, now: dt.datetime
) -> int:
    """Turns rows whose stream ended without a finish into `interrupted`, saying why in
    metadata (`interrupted_reason`); returns how many."""
    count = 0
    for message in messages:
        message.status = "interrupted"
        message.meta = {**message.meta, "interrupted_reason": reason}
        message.updated_at = now
        count += 1
    await s.flush()
    return count
