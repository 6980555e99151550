"""A turn's messages besides its opening and finish: the history the model is shown (the
newest, or up to an earlier answer for a Responses API continuation), the partial text of
running answers, the sweep of abandoned ones, the taking back of a thread's last exchange and
the deleting of a stored response's. (What the user sees is the threads' repository's,
app.threads.repository.)"""

from __future__ import annotations

import datetime as dt
import functools
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Select,
    and_,
    bindparam,
    delete,
    not_,
    or_,
    select,
    update,
)
from sqlalchemy.ext.asyncio import AsyncSession

from app.answer.interruptions import STALE_STREAMING
from app.core.cleaning import clean_text
from app.core.clock import utcnow
from app.store.models import Message, Thread, table_of
from app.store.ownership import owned_id
from app.threads.branch_repository import path_to, subtree_ids
from app.threads.repository import touch_thread

#: The tables, for the Core statements of the histories.
_MESSAGES, _THREADS = table_of(Message), table_of(Thread)


def _shown(*, with_text: ColumnElement[bool]) -> tuple[ColumnElement[bool], ...]:
    """What the model may see of a thread's rows: none still streaming, no failed answer,
    and only those `with_text` says have something to show."""
    m = _MESSAGES.c
    failed_assistant = and_(m.role == "assistant", m.status == "failed")
    return m.status != "streaming", not_(failed_assistant), with_text


def context_select(limit: int, *columns: Any) -> Select[Any]:
    """The newest `limit` messages of the thread's branch the model may see, newest first:
    rows still streaming, failed assistant rows and empty rows left out. For the thread of
    the `context_of` parameter."""
    m = _MESSAGES.c  # table columns: with plain columns selected, a Core statement
    return (
        select(*columns)
        .where(m.thread_id == bindparam("context_of", type_=m.thread_id.type), m.on_branch,
               *_shown(with_text=m.content != ""))
        .order_by(m.created_at.desc(), m.id.desc())
        .limit(limit)
    )


@dataclass(frozen=True, slots=True)
class HistoryRow:
    """A message as a continuation's history holds it: an answer that was only a tool call
    keeps its calls (so that a tool's output can follow it)."""

    role: str
    content: str
    created_at: dt.datetime
    tool_calls: list[dict[str, Any]] | None


async def history_until(s: AsyncSession, user_id: str, answer_id: uuid.UUID, *, limit: int
                        ) -> tuple[uuid.UUID, list[HistoryRow]] | None:
    """The thread of the user's answer `answer_id` and the newest `limit` messages of the
    branch that ends at that answer (on the page's branch or not), oldest first, as
    context_history leaves them out (an answer that was only a tool call is kept); None
    when it is no answer of the user's."""
    m = _MESSAGES.c
    thread_id = (await s.execute(
        select(m.thread_id).where(m.id == owned_id(_MESSAGES, answer_id, user_id, "owned"),
                                  m.role == "assistant"))).scalar_one_or_none()
    if thread_id is None:
        return None
    calls = m.metadata["tool_calls"].as_string()
    only_calls = and_(m.role == "assistant", calls.is_not(None), calls != "[]")
    path = path_to(bindparam("path_end", answer_id, type_=m.id.type))
    rows = await s.execute(
        select(m.role, m.content, m.created_at, m.metadata["tool_calls"])
        .where(m.id.in_(select(path.c.id)),
               *_shown(with_text=or_(m.content != "", only_calls)))
        .order_by(m.created_at.desc(), m.id.desc())
        .limit(limit))
    return thread_id, [HistoryRow(role, content, created, tools if role == "assistant" else None)
                       for role, content, created, tools in reversed(rows.all())]


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
    """Rows no process claims (`stream_process` NULL: written before processes had ids)
    left `streaming` longer than older_than become `interrupted`. A row a process claims is
    never swept by age, however long it streams: it is the dead-process sweep's once its
    process's heartbeat stops (app.process), and a live answer is bounded by `max_answer_s`
    instead. completed_at stays NULL: a live-but-slow process may still finish it. Returns
    how many rows changed."""
    cutoff = utcnow() - older_than
    stale = await s.execute(
        select(Message)
        .where(Message.status == "streaming", Message.stream_process.is_(None),
               Message.created_at < cutoff)
        .with_for_update(skip_locked=True)
    )
    return await mark_interrupted(s, stale.scalars(), reason=STALE_STREAMING, now=utcnow())


#: The key of a running answer's metadata that carries its calls so far (app.answer.records
#: checkpoint_entry): the dead-process sweep records them.
CHECKPOINT_CALLS = "checkpoint_calls"


async def checkpoint_contents(
    s: AsyncSession, contents: Mapping[uuid.UUID, str], *, now: dt.datetime,
    calls: Mapping[uuid.UUID, list[dict[str, Any]]] | None = None,
    reasonings: Mapping[uuid.UUID, str] | None = None,
) -> None:
    """The partial text of streams still running, one executemany per shape of row, and for
    those in `calls` their calls so far (the row's metadata: nothing else writes it while
    it streams), for those in `reasonings` their reasoning so far (what the user saw of the
    thinking, kept should the process die). Only rows still `streaming` are written: a
    finished (or swept) row is never overwritten by a checkpoint that lost the race. (No
    count: asyncpg's executemany reports none.)"""
    calls, reasonings = calls or {}, reasonings or {}
    shapes: dict[tuple[bool, bool], list[dict[str, Any]]] = {}
    for mid, text in contents.items():
        row: dict[str, Any] = {"mid": mid, "text": text, "at": now}
        if mid in calls:
            row["meta"] = {CHECKPOINT_CALLS: calls[mid]}
        if reasonings.get(mid):
            row["reasoning"] = clean_text(reasonings[mid])
        shapes.setdefault((mid in calls, "reasoning" in row), []).append(row)
    for (with_calls, with_reasoning), rows in shapes.items():
        await s.execute(_checkpoint_statement(with_calls, with_reasoning), rows)


@functools.cache
def _checkpoint_statement(with_calls: bool, with_reasoning: bool) -> Any:
    """The checkpoint's UPDATE, with the metadata or without, the reasoning or without."""
    table = table_of(Message)
    values: dict[str, Any] = {"content": bindparam("text")}
    if with_calls:
        values["metadata"] = bindparam("meta", type_=table.c.metadata.type)
    if with_reasoning:
        values["reasoning"] = bindparam("reasoning", type_=table.c.reasoning.type)
    return (
        update(table)
        .where(table.c.id == bindparam("mid"), table.c.status == "streaming")
        .values(**values, updated_at=bindparam("at", type_=table.c.updated_at.type))
    )


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


async def delete_from(s: AsyncSession, message: Message) -> int:
    """Delete `message` and every message that follows it, in every version (its subtree,
    app.turn.rows.branches), and mark the thread active; returns how many went. Their
    llm_calls rows stay (billing data) with the message id set to NULL."""
    result = await s.execute(
        delete(Message).where(Message.thread_id == message.thread_id,
                              Message.id.in_(subtree_ids(message.id))))
    await touch_thread(s, message.thread_id)
    return int(result.rowcount)  # type: ignore[attr-defined]


async def delete_messages(s: AsyncSession, thread_id: uuid.UUID, ids: list[uuid.UUID],
                          parent: uuid.UUID | None) -> int:
    """Delete these messages of the thread, a run of one branch whose first follows
    `parent` (one exchange taken out of the middle: the later ones stay, and now follow
    `parent`); returns how many went. Their llm_calls rows stay (billing data) with the
    message id set to NULL."""
    await s.execute(update(Message).where(Message.thread_id == thread_id,
                                          Message.parent_id.in_(ids), Message.id.not_in(ids))
                    .values(parent_id=parent))
    result = await s.execute(
        delete(Message).where(Message.thread_id == thread_id, Message.id.in_(ids)))
    return int(result.rowcount)  # type: ignore[attr-defined]


async def has_messages(s: AsyncSession, thread_id: uuid.UUID) -> bool:
    """Whether any message, shown or not, is left in the thread."""
    result = await s.execute(select(Message.id).where(Message.thread_id == thread_id).limit(1))
    return result.first() is not None


async def last_message(s: AsyncSession, thread_id: uuid.UUID) -> Message | None:
    """The newest message of the thread's branch, hidden or not (history order:
    created_at, then id)."""
    result = await s.execute(
        select(Message).where(Message.thread_id == thread_id, Message.on_branch)
        .order_by(Message.created_at.desc(), Message.id.desc()).limit(1))
    return result.scalar_one_or_none()


async def question_of(s: AsyncSession, answer: Message) -> Message | None:
    """The user message an answer replies to: the one it follows (a follow-up's hidden
    prompt included)."""
    if answer.parent_id is None:
        return None
    result = await s.execute(
        select(Message).where(Message.id == answer.parent_id, Message.role == "user"))
    return result.scalar_one_or_none()


async def reopen_answer(s: AsyncSession, answer: Message, *, process_id: str | None,
                        now: dt.datetime) -> None:
    """A finished answer made `streaming` again, to be finished by a continuation: its text
    stays, its finish (which writes only an unfinished row) may run once more, and its
    process claims it as an opening's row is claimed, for the dead-process sweep."""
    answer.status = "streaming"
    answer.completed_at = None
    answer.stream_process = process_id
    answer.updated_at = now
    await s.flush()
