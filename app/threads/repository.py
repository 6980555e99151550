"""Threads: every lookup a user makes is scoped by user_id (a foreign thread looks missing)."""

from __future__ import annotations

import uuid
from typing import Any, TypeVar

from sqlalchemy import Select, delete, func, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from app.core.cleaning import SanitizeReport, clean_json, clean_text
from app.core.clock import utcnow
from app.store.models import Message, Thread, table_of
from app.store.ownership import owned_id
from app.store.summaries import ThreadSummary
from app.store.visibility import visible_sql
from app.stream.plain import plain_text
from app.threads.branch_repository import path_ids

PREVIEW_CHARS = 120
#: How much of the message the preview is made from: markup takes room that the plain words
#: of the preview do not.
PREVIEW_SOURCE_CHARS = 4 * PREVIEW_CHARS
_THREADS, _MESSAGES = table_of(Thread), table_of(Message)
LockedSelect = TypeVar("LockedSelect", bound=Select[Any])


def _clean_optional(value: str | None) -> str | None:
    return None if value is None else clean_text(value, SanitizeReport())


async def create_thread(s: AsyncSession, user_id: str, title: str | None = None, *,
                        origin: str = "chat") -> Thread:
    """A new, empty thread owned by user_id, made by `origin` (THREAD_ORIGINS)."""
    now = utcnow()
    thread = Thread(
        id=uuid.uuid4(), user_id=user_id, title=_clean_optional(title), autonomy={},
        created_at=now, updated_at=now, origin=origin,
    )
    s.add(thread)
    await s.flush()
    return thread


async def get_thread(s: AsyncSession, user_id: str, thread_id: uuid.UUID) -> Thread | None:
    """The thread if it exists AND belongs to user_id; another user's thread is None."""
    result = await s.execute(
        select(Thread).where(Thread.id == owned_id(_THREADS, thread_id, user_id, "owned")))
    return result.scalar_one_or_none()


def with_thread_lock(query: LockedSelect) -> LockedSelect:
    """`query` holding the thread rows it reads: FOR NO KEY UPDATE, the lock an UPDATE of the
    row takes, so it orders against that UPDATE yet still lets another transaction insert a
    row that references the thread. (SQLite has no row locks, and SQLAlchemy writes no FOR
    clause there: BEGIN IMMEDIATE holds the whole database instead.)"""
    return query.with_for_update(key_share=True)


def _preview(source: str | None) -> str | None:
    """The start of a message as one line of plain words (a list shows no markdown)."""
    if source is None:
        return None
    text = plain_text(source)
    cut = len(source) > PREVIEW_SOURCE_CHARS or len(text) > PREVIEW_CHARS
    return text[:PREVIEW_CHARS] + "…" if cut else text


async def list_threads(s: AsyncSession, user_id: str, origin: str | None = None
                       ) -> list[ThreadSummary]:
    """The user's threads (of one origin, or all with None), most recently updated first,
    with counts and a preview (the latest non-empty visible message) that ignore synthetic
    and legacy follow-up messages."""
    count = (
        select(func.count(Message.id))
        .where(Message.thread_id == Thread.id, Message.on_branch, visible_sql())
        .correlate(Thread)
        .scalar_subquery()
    )
    preview = (
        select(func.substr(Message.content, 1, PREVIEW_SOURCE_CHARS + 1))
        .where(Message.thread_id == Thread.id, Message.on_branch, visible_sql(),
               Message.content != "")
        .order_by(Message.created_at.desc(), Message.id.desc())
        .limit(1)
        .correlate(Thread)
        .scalar_subquery()
    )
    query = (
        select(Thread.id, Thread.title, count, preview, Thread.updated_at, Thread.created_at,
               Thread.model, Thread.origin)
        .where(Thread.user_id == user_id)
        .order_by(Thread.updated_at.desc(), Thread.id)
    )
    if origin is not None:
        query = query.where(Thread.origin == origin)
    return [
        ThreadSummary(id=r[0], title=r[1], message_count=int(r[2]), preview=_preview(r[3]),
                      updated_at=r[4], created_at=r[5], model=r[6], origin=r[7])
        for r in await s.execute(query)
    ]


async def delete_thread(s: AsyncSession, user_id: str, thread_id: uuid.UUID) -> bool:
    """Delete the user's thread and (by FK cascade) its messages, follow-ups, traces.
    llm_calls rows stay (billing data) with thread/message ids set to NULL."""
    result = await s.execute(
        delete(Thread).where(Thread.id == thread_id, Thread.user_id == user_id)
    )
    return bool(result.rowcount)  # type: ignore[attr-defined]


async def lock_thread(s: AsyncSession, user_id: str, thread_id: uuid.UUID) -> Thread | None:
    """The user's thread, held (on PostgreSQL) until the transaction ends: a turn opening on
    it waits, as it takes the same lock."""
    query = select(Thread).where(Thread.id == owned_id(_THREADS, thread_id, user_id, "owned"))
    result = await s.execute(with_thread_lock(query))
    return result.scalar_one_or_none()


async def last_user_message(s: AsyncSession, thread_id: uuid.UUID) -> Message | None:
    """The thread's latest visible message written by its user."""
    result = await s.execute(
        select(Message)
        .where(Message.thread_id == thread_id, Message.role == "user", Message.on_branch,
               visible_sql())
        .order_by(Message.created_at.desc(), Message.id.desc())
        .limit(1))
    return result.scalar_one_or_none()


async def is_streaming(s: AsyncSession, thread_id: uuid.UUID) -> bool:
    """An answer of the thread is still being written."""
    result = await s.execute(
        select(Message.id)
        .where(Message.thread_id == thread_id, Message.status == "streaming")
        .limit(1))
    return result.first() is not None


async def set_title(s: AsyncSession, thread_id: uuid.UUID, title: str | None) -> None:
    """Name the thread (the title call; the caller has already checked ownership)."""
    await s.execute(
        update(Thread).where(Thread.id == thread_id)
        .values(title=_clean_optional(title), updated_at=utcnow())
    )


async def set_summary(s: AsyncSession, thread_id: uuid.UUID, summary: str | None) -> None:
    """Store the summary of the older turns (the summary call)."""
    await s.execute(
        update(Thread).where(Thread.id == thread_id).values(summary=_clean_optional(summary))
    )


async def set_autonomy(
    s: AsyncSession, user_id: str, thread_id: uuid.UUID, autonomy: dict[str, Any]
) -> Thread | None:
    """Merge autonomy settings into the user's thread (PATCH semantics); None if not theirs."""
    thread = await get_thread(s, user_id, thread_id)
    if thread is None:
        return None
    thread.autonomy = {**(thread.autonomy or {}), **clean_json(autonomy, SanitizeReport())}
    thread.updated_at = utcnow()
    await s.flush()
    return thread


async def touch_thread(s: AsyncSession, thread_id: uuid.UUID) -> None:
    """Mark activity on a thread (it moves to the top of the list). A Core UPDATE: the ORM's
    would first look for the row among the session's objects, for nothing. (A turn does not
    call this: its opening and its finish move the thread in their own statements.)"""
    threads = table_of(Thread)
    await s.execute(update(threads).where(threads.c.id == thread_id).values(updated_at=utcnow()))


async def get_message(s: AsyncSession, user_id: str, message_id: uuid.UUID) -> Message | None:
    """One of the user's messages by id."""
    result = await s.execute(select(Message).where(
        Message.id == owned_id(_MESSAGES, message_id, user_id, "owned")))
    return result.scalar_one_or_none()


async def visible_history(
    s: AsyncSession, user_id: str, thread_id: uuid.UUID, *, include_synthetic: bool = False,
    whole_tree: bool = False, ending_at: uuid.UUID | None = None,
) -> list[Message]:
    """The messages of the thread's current branch in order, as the user sees them:
    synthetic and legacy follow-up prompts excluded unless include_synthetic (debugging).
    `whole_tree`: every version, on the branch or not; `ending_at`: the branch that ends at
    that message instead (app.threads.branch_repository). Another user's thread gives []."""
    query = select(Message).where(
        Message.thread_id == owned_id(_THREADS, thread_id, user_id, "owned"))
    if ending_at is not None:
        query = query.where(Message.id.in_(path_ids(ending_at)))
    elif not whole_tree:
        query = query.where(Message.on_branch)
    if not include_synthetic:
        query = query.where(visible_sql())
    result = await s.execute(query.order_by(Message.created_at, Message.id))
    return list(result.scalars())

