"""The statements and row values a turn's writes share on both databases: the new rows'
values, the finish's two UPDATEs, the llm_calls row of a call, and the reads of the
opening's checks. Each statement is built once: building one costs more CPU than running
it, and only its parameters change from turn to turn."""

from __future__ import annotations

import datetime as dt
import functools
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from sqlalchemy import (
    BindParameter,
    Update,
    bindparam,
    delete,
    func,
    insert,
    or_,
    select,
    update,
)
from sqlalchemy.exc import IntegrityError

from app.answer.records import CallRecord, FinishedMessage
from app.core.cleaning import clean_text
from app.core.clock import utcnow
from app.core.synthetic import real_user_metadata
from app.store.errors import ContentTooLong, MessageAlreadyFinished, MessageNotFound, ThreadBusy
from app.store.models import Followup, LlmCall, Message, OpenCall, Thread, table_of
from app.store.ownership import owned_id
from app.store.storable import clean_message
from app.threads.branch_repository import branch_tip
from app.turn.rows.shapes import CallOpening, DayBudget, OpeningRequest

STREAMING_INDEX = "uq_messages_one_streaming_per_thread"
MESSAGES, THREADS, CALLS = table_of(Message), table_of(Thread), table_of(LlmCall)
OPEN_CALLS = table_of(OpenCall)

#: An open call's row as its opening inserts it. Its parameters are not named as the
#: table's columns: PostgreSQL's INSERT ... SELECT would take them for the values.
OPEN_CALL_VALUES = {"id": bindparam("call_id", type_=OPEN_CALLS.c.id.type),
                    "user_id": bindparam("call_user", type_=OPEN_CALLS.c.user_id.type),
                    "process_id": bindparam("call_process", type_=OPEN_CALLS.c.process_id.type),
                    "started_at": bindparam("call_started", type_=OPEN_CALLS.c.started_at.type)}
#: An open call's row, once its calls are billed (parameter `open_call`).
DELETE_OPEN_CALL = delete(OPEN_CALLS).where(
    OPEN_CALLS.c.id == bindparam("open_call", type_=OPEN_CALLS.c.id.type))


def open_call_params(opening: CallOpening, now: dt.datetime) -> dict[str, Any]:
    """OPEN_CALL_VALUES' parameters, with those of the checks' reads (the day's usage)."""
    return {"call_id": opening.call_id, "call_user": opening.user_id,
            "call_process": opening.process_id, "call_started": now, "owner": opening.user_id,
            "stream_cap": opening.stream_cap, **budget_params(opening.budget)}


def budget_params(budget: DayBudget | None) -> dict[str, Any]:
    """The parameters of an opening's budget check (none without a budget)."""
    if budget is None:
        return {}
    return {"budget_day": budget.day, "token_budget": budget.tokens,
            "cost_budget": budget.cost_usd}

#: The columns a new row is inserted with (`tokens` is computed by the database), each with
#: the Message attribute it comes from.
INSERTED_COLUMNS = {
    "id": "id", "thread_id": "thread_id", "user_id": "user_id", "role": "role",
    "content": "content", "metadata": "meta", "status": "status", "synthetic": "synthetic",
    "trigger_type": "trigger_type", "created_at": "created_at", "updated_at": "updated_at",
    "completed_at": "completed_at", "stream_process": "stream_process",
    "reasoning": "reasoning", "reasoning_ms": "reasoning_ms", "parent_id": "parent_id",
    "on_branch": "on_branch"}


def check_length(content: str, max_chars: int) -> None:
    """Refuse over-long content before it reaches the database."""
    if len(content) > max_chars:
        raise ContentTooLong(len(content), max_chars)


def new_rows(request: OpeningRequest, user_at: dt.datetime | None, assistant_at: dt.datetime,
             parent: uuid.UUID | None = None) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """A turn's new rows as their attributes' values: the user message (None for a turn
    without a question, or without `user_at`) and the answer, at the times given, on the
    branch after `parent` (the user message follows it, the answer the user message).
    Raises ContentTooLong for an over-long question."""
    user = None
    if request.content is not None and user_at is not None:
        user = _user_values(request, request.content, user_at) | {"parent_id": parent}
    return user, {
        "id": uuid.uuid4(), "thread_id": request.thread_id, "user_id": request.user_id,
        "role": "assistant", "content": "", "meta": {}, "status": "streaming",
        "synthetic": False, "trigger_type": None, "created_at": assistant_at,
        "updated_at": assistant_at, "completed_at": None,
        # the process streaming it: the row is swept soon after that process dies
        "stream_process": request.process_id, "reasoning": None, "reasoning_ms": None,
        "parent_id": user["id"] if user is not None else parent, "on_branch": True,
    }


def _user_values(request: OpeningRequest, content: str, now: dt.datetime) -> dict[str, Any]:
    """A user message's row, checked and cleaned. Only the server makes synthetic messages,
    and only a literal `synthetic=True` does."""
    check_length(content, request.max_chars)
    is_synthetic = request.synthetic is True
    if is_synthetic and not request.trigger_type:
        raise ValueError("a synthetic message needs a trigger_type")
    metadata: dict[str, Any] = (
        {"synthetic": True, "trigger_type": request.trigger_type,
         "trigger_reason": request.trigger_reason} if is_synthetic else {})
    clean_content, clean_meta = clean_message(content, metadata)
    if not is_synthetic:
        clean_meta.update(real_user_metadata(clean_content))
    # Every column set, as on the assistant row: rows with the same columns share one INSERT.
    return {
        "id": uuid.uuid4(), "thread_id": request.thread_id, "user_id": request.user_id,
        "role": "user", "content": clean_content, "meta": clean_meta, "status": "complete",
        "synthetic": is_synthetic,
        "trigger_type": clean_meta.get("trigger_type") if is_synthetic else None,
        "created_at": now, "updated_at": now, "completed_at": now, "stream_process": None,
        "reasoning": None, "reasoning_ms": None, "parent_id": None, "on_branch": True,
    }


def inserted_values(values: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """A new row's columns as an INSERT takes them, each named `prefix` + its column."""
    return {prefix + column: values[attribute]
            for column, attribute in INSERTED_COLUMNS.items()}


def inserted_params(prefix: str) -> dict[str, BindParameter[Any]]:
    """A parameter for each column a new row is inserted with, named as inserted_values
    names its value."""
    return {column: bindparam(prefix + column, type_=MESSAGES.c[column].type)
            for column in INSERTED_COLUMNS}


@contextmanager
def busy_on_conflict(thread_id: uuid.UUID) -> Iterator[None]:
    """The one-streaming-message-per-thread index refusing a row, raised as ThreadBusy."""
    try:
        yield
    except IntegrityError as error:
        text = str(error.orig)
        if STREAMING_INDEX in text or "UNIQUE constraint failed: messages.thread_id" in text:
            raise ThreadBusy(f"thread {thread_id} already has a streaming message") from error
        raise


def open_thread_update(thread_id: BindParameter[uuid.UUID], *, owned: bool = True) -> Update:
    """A turn's thread opened (UPDATE ... RETURNING): the UPDATE holds the thread's row until
    the transaction ends (PostgreSQL; SQLite's write transactions are serialised already):
    every transaction that writes a thread's messages takes this lock before anything else
    (LOCK_OWNED_THREAD, the thread's UPDATE first in a finish), so they all lock in one
    order and cannot deadlock. It moves the thread to the top and brings its newest
    message's time and the newest message of its branch (what a new message follows).
    `owned=False`: the caller checks the owner itself. The subqueries are bound to the
    parameter, not correlated: SQLite writes RETURNING's columns unqualified, so a
    correlated `threads.id` would read as the subquery's own `messages.id`."""
    newest = (select(func.max(MESSAGES.c.created_at))
              .where(MESSAGES.c.thread_id == thread_id).scalar_subquery())
    target = (owned_id(THREADS, thread_id, bindparam("owner", type_=THREADS.c.user_id.type),
                       "owned_thread") if owned else thread_id)
    return (
        update(THREADS)
        .where(THREADS.c.id == target)
        .values(updated_at=bindparam("now", type_=THREADS.c.updated_at.type),
                # the turn's model choice is kept as the thread's (NULL: unchanged)
                model=func.coalesce(bindparam("chosen_model", None, type_=THREADS.c.model.type),
                                    THREADS.c.model))
        .returning(*THREADS.c, newest.label("newest_message_at"),
                   branch_tip(thread_id).label("branch_tip"))
    )


#: The user's thread opened, found by its id and owner (parameters `thread_id`, `owner`).
OPEN_THREAD = open_thread_update(bindparam("thread_id", type_=THREADS.c.id.type))

#: The user's thread, locked as an UPDATE of it would lock it (FOR NO KEY UPDATE: it still
#: lets another transaction insert a row that references the thread), before an opening's
#: guard reads under that lock. SQLite's write transaction holds every row already.
LOCK_OWNED_THREAD = (
    select(THREADS.c.id)
    .where(THREADS.c.id == bindparam("thread_id", type_=THREADS.c.id.type),
           THREADS.c.user_id == bindparam("owner", type_=THREADS.c.user_id.type))
    .with_for_update(key_share=True)
)

#: A finish's thread UPDATE, first, as an opening locks it: one lock order for both, so a
#: concurrent opening (answered 409) cannot deadlock with a finish. It moves the thread to
#: the top of the list and reads its autonomy settings under the lock. A message no longer
#: `streaming` (finished already, or taken over by a sweep) touches nothing.
TOUCH_THREAD_OF_MESSAGE = (
    update(THREADS)
    .where(THREADS.c.id == select(MESSAGES.c.thread_id)
           .where(MESSAGES.c.id == bindparam("message_id", type_=MESSAGES.c.id.type),
                  MESSAGES.c.status == "streaming")
           .scalar_subquery())
    .values(updated_at=bindparam("now", type_=THREADS.c.updated_at.type))
    .returning(THREADS.c.autonomy)
)
#: The finish writes only while the row is still its process's own, `streaming`: the fence.
#: A sweep that took the row over (its process looked dead: app.process) made it
#: `interrupted`, and a late finish of that process (a partition healed) stores nothing.
FINISH_MESSAGE = (
    update(MESSAGES)
    .where(MESSAGES.c.id == bindparam("message_id", type_=MESSAGES.c.id.type),
           MESSAGES.c.status == "streaming")
    .values({column: bindparam(f"new_{column}", type_=MESSAGES.c[column].type)
             for column in ("content", "metadata", "status", "completed_at", "updated_at",
                            "reasoning", "reasoning_ms")})
    .returning(*MESSAGES.c)
)
#: Whether a message exists, when its finish stored nothing.
MESSAGE_EXISTS = select(MESSAGES.c.id).where(
    MESSAGES.c.id == bindparam("message_id", type_=MESSAGES.c.id.type))


def finish_params(finished: FinishedMessage) -> dict[str, Any]:
    """The finish's parameters: the text and metadata cleaned, the time now. Raises
    ValueError for a message still streaming."""
    if finished.status == "streaming":
        raise ValueError("a finished message cannot be streaming")
    content, metadata = clean_message(finished.content, finished.metadata)
    now = utcnow()
    reasoning = stored_reasoning(finished.reasoning)
    return {"message_id": finished.message_id, "now": now, "new_content": content,
            "new_metadata": metadata, "new_status": finished.status,
            "new_completed_at": now, "new_updated_at": now, "new_reasoning": reasoning,
            "new_reasoning_ms": _thinking_ms(finished.reasoning_ms, reasoning)}


def _thinking_ms(ms: int | None, reasoning: str | None) -> int | None:
    """The thinking time as stored: none without reasoning, never negative (the wall clock
    may step back while a model thinks)."""
    return max(0, ms) if ms is not None and reasoning is not None else None


def stored_reasoning(reasoning: str | None) -> str | None:
    """An answer's reasoning as its column holds it: storable text, NULL when there was
    none (an empty reasoning is none, and has no thinking time: the page shows no "Thought
    for" for it)."""
    return clean_text(reasoning) if reasoning else None


def not_finished(message_id: uuid.UUID, *, found: bool) -> MessageNotFound | MessageAlreadyFinished:
    """Why a finish stored nothing: the message is gone (its thread was deleted), or it was
    finished already (its usage must not be counted twice)."""
    if not found:
        return MessageNotFound(str(message_id))
    return MessageAlreadyFinished(str(message_id))


def call_values(call: CallRecord, now: dt.datetime) -> dict[str, Any]:
    """A call's llm_calls row but its message, thread and user."""
    return {
        "id": uuid.uuid4(), "stage": call.stage, "model": call.model,
        "prompt_tokens": call.prompt_tokens, "completion_tokens": call.completion_tokens,
        "total_tokens": call.total_tokens, "cost_usd": call.cost_usd,
        "usage_source": call.usage_source, "started_at": call.started_at,
        "first_token_at": call.first_token_at, "finished_at": call.finished_at,
        "duration_ms": call.duration_ms, "status": call.status, "error": call.error,
        "server": call.server, "reasoning_tokens": call.reasoning_tokens,
        "created_at": now,
    }


def call_rows(calls: Sequence[CallRecord], user_id: str, now: dt.datetime, *,
              message_id: uuid.UUID | None, thread_id: uuid.UUID | None
              ) -> list[dict[str, Any]]:
    """The llm_calls rows of a turn's calls, as INSERT_CALL takes them."""
    return [{"message_id": message_id, "thread_id": thread_id, "user_id": user_id,
             **call_values(call, now)} for call in calls]


#: One llm_calls row, a parameter for each column named as the column (call_rows' keys).
INSERT_CALL = insert(CALLS).values({column.name: bindparam(column.name, type_=column.type)
                                    for column in CALLS.c})


@functools.cache
def cancel_pending_statement(claimed_too: bool) -> Update:
    """The thread's pending follow-ups cancelled (with `claimed_too`, claimed ones too: a
    real user message's opening), its parameters `of_thread` and `now`. Built once each way:
    every real user message's opening runs it; the follow-ups' repository too."""
    followups = table_of(Followup)
    status = followups.c.status
    # Equalities, not IN: an IN list is rendered into the SQL text at every execution.
    wanted = or_(status == "pending", status == "claimed") if claimed_too else status == "pending"
    return (
        update(followups)
        .where(followups.c.thread_id == bindparam("of_thread", type_=followups.c.thread_id.type),
               wanted)
        .values(status="cancelled", lease_expires_at=None,
                finished_at=bindparam("now", type_=followups.c.finished_at.type))
    )
