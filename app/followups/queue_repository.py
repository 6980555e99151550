"""The follow-up queue: scheduling, atomic claims with a lease, and conditional completion.

Several gateway processes poll the same table. A claim is one statement: on PostgreSQL an
UPDATE over a `FOR UPDATE SKIP LOCKED` subquery (two workers never wait on or take the same
row), on SQLite a conditional UPDATE ... RETURNING (transactions are BEGIN IMMEDIATE, so claims
are serialised). Each claim bumps `attempts`; (claimed_by, attempts) identifies it, and every
later write is conditional on it, so a worker whose lease ran out and was re-claimed by another
cannot complete, release or renew what is no longer its own."""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import ColumnElement, and_, exists, func, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from app.answer.interruptions import FOLLOWUP_WORKER_DIED
from app.followups.repository import cancel_pending_for_thread, schedule_followup
from app.store.models import Followup, Message, Thread
from app.store.visibility import hidden_sql, visible_sql
from app.threads.repository import with_thread_lock
from app.turn.rows.messages import mark_interrupted

Blocker = Literal["lost_claim", "user_replied", "already_started"]


@dataclass(frozen=True)
class Claim:
    """A follow-up this worker holds (plain data, no ORM state)."""

    id: uuid.UUID
    thread_id: uuid.UUID
    user_id: str
    trigger_type: str
    reason: str
    due_at: dt.datetime
    created_at: dt.datetime
    attempts: int
    claimed_by: str
    lease_expires_at: dt.datetime


def _claim_of(row: Followup) -> Claim:
    assert row.claimed_by is not None and row.lease_expires_at is not None
    return Claim(id=row.id, thread_id=row.thread_id, user_id=row.user_id,
                 trigger_type=row.trigger_type, reason=row.reason, due_at=row.due_at,
                 created_at=row.created_at, attempts=row.attempts, claimed_by=row.claimed_by,
                 lease_expires_at=row.lease_expires_at)


def _is_mine(claim: Claim) -> ColumnElement[bool]:
    return and_(Followup.id == claim.id, Followup.status == "claimed",
                Followup.claimed_by == claim.claimed_by, Followup.attempts == claim.attempts)


async def schedule_one(
    s: AsyncSession, *, thread_id: uuid.UUID, user_id: str, trigger_type: str, reason: str,
    due_at: dt.datetime,
) -> Followup:
    """The thread's only pending follow-up: any earlier pending one is cancelled first."""
    await cancel_pending_for_thread(s, thread_id)
    return await schedule_followup(s, thread_id=thread_id, user_id=user_id,
                                   trigger_type=trigger_type, reason=reason, due_at=due_at)


async def claim_due(
    s: AsyncSession, *, worker_id: str, now: dt.datetime, lease: dt.timedelta,
    max_attempts: int, limit: int,
) -> list[Claim]:
    """Atomically take up to `limit` follow-ups that are due, or whose claim's lease expired
    (its process died) and that have attempts left; marks them claimed by worker_id."""
    takeable = or_(
        and_(Followup.status == "pending", Followup.due_at <= now),
        and_(Followup.status == "claimed", Followup.lease_expires_at <= now,
             Followup.attempts < max_attempts),
    )
    candidates = (
        select(Followup.id).where(takeable).order_by(Followup.due_at, Followup.id).limit(limit)
    )
    candidates = candidates.with_for_update(skip_locked=True)  # no FOR clause on SQLite
    result = await s.execute(
        update(Followup)
        .where(Followup.id.in_(candidates.scalar_subquery()), takeable)
        .values(status="claimed", claimed_by=worker_id, claimed_at=now,
                lease_expires_at=now + lease, attempts=Followup.attempts + 1)
        .returning(Followup)
        .execution_options(synchronize_session=False)
    )
    return [_claim_of(row) for row in result.scalars()]


async def fail_exhausted(s: AsyncSession, *, now: dt.datetime, max_attempts: int) -> int:
    """Claims whose lease expired with no attempts left become `failed`; returns how many."""
    result = await s.execute(
        update(Followup)
        .where(Followup.status == "claimed", Followup.lease_expires_at <= now,
               Followup.attempts >= max_attempts)
        .values(status="failed", finished_at=now)
    )
    return int(result.rowcount)  # type: ignore[attr-defined]


async def renew_lease(s: AsyncSession, claim: Claim, until: dt.datetime) -> bool:
    """Extend the lease of a claim still ours (a long turn); False when it is not."""
    result = await s.execute(
        update(Followup).where(_is_mine(claim)).values(lease_expires_at=until)
    )
    return bool(result.rowcount)  # type: ignore[attr-defined]


async def finish_claim(
    s: AsyncSession, claim: Claim, status: Literal["done", "failed", "cancelled"],
    now: dt.datetime,
) -> bool:
    """Settle a claim, only if it is still ours; False when another worker holds it now."""
    result = await s.execute(
        update(Followup).where(_is_mine(claim)).values(status=status, finished_at=now,
                                                       lease_expires_at=None)
    )
    return bool(result.rowcount)  # type: ignore[attr-defined]


async def release_for_retry(s: AsyncSession, claim: Claim, retry_at: dt.datetime) -> bool:
    """Give a claim back as pending, due at retry_at (the thread was busy); attempts stay."""
    result = await s.execute(
        update(Followup).where(_is_mine(claim))
        .values(status="pending", due_at=retry_at, claimed_by=None, claimed_at=None,
                lease_expires_at=None)
    )
    return bool(result.rowcount)  # type: ignore[attr-defined]


async def lock_thread(s: AsyncSession, thread_id: uuid.UUID) -> dict[str, Any] | None:
    """Serialise with a user turn on the thread and return its current autonomy settings:
    the thread lock every turn-opening transaction takes first (threads.get_thread)."""
    query = with_thread_lock(select(Thread.autonomy).where(Thread.id == thread_id))
    autonomy: dict[str, Any] | None = await s.scalar(query)
    return autonomy


async def blocker(s: AsyncSession, claim: Claim) -> Blocker | None:
    """Why the claimed follow-up must not run now, or None. Called inside the transaction
    that would store its synthetic message, after lock_thread."""
    mine = await s.scalar(select(exists().where(_is_mine(claim))))
    if not mine:
        status = await s.scalar(select(Followup.status).where(Followup.id == claim.id))
        return "user_replied" if status == "cancelled" else "lost_claim"
    newer = and_(Message.thread_id == claim.thread_id, Message.role == "user",
                 Message.created_at > claim.created_at)
    if await s.scalar(select(exists().where(newer, visible_sql()))):
        return "user_replied"
    if await s.scalar(select(exists().where(newer, hidden_sql()))):
        return "already_started"
    return None


async def consecutive_followups(s: AsyncSession, thread_id: uuid.UUID) -> int:
    """Synthetic prompts since the user last wrote (all of them if the user never did)."""
    last_real = (
        select(func.max(Message.created_at))
        .where(Message.thread_id == thread_id, Message.role == "user", visible_sql())
        .scalar_subquery()
    )
    count = await s.scalar(
        select(func.count(Message.id)).where(
            Message.thread_id == thread_id, Message.role == "user", hidden_sql(),
            or_(last_real.is_(None), Message.created_at > last_real),
        )
    )
    return int(count or 0)


async def interrupt_orphaned_replies(
    s: AsyncSession, thread_id: uuid.UUID, after: dt.datetime, now: dt.datetime
) -> int:
    """Assistant rows still `streaming` in the thread since `after`, left by a worker that
    died mid-turn (its lease expired), become `interrupted`; returns how many. Locked and
    skipped when locked (PostgreSQL): a worker that only lost its lease and is finishing the
    row right now keeps its answer instead of having it overwritten."""
    rows = await s.execute(
        select(Message).where(Message.thread_id == thread_id, Message.role == "assistant",
                              Message.status == "streaming", Message.created_at > after)
        .with_for_update(skip_locked=True)
    )
    return await mark_interrupted(s, rows.scalars(), reason=FOLLOWUP_WORKER_DIED, now=now)


async def get_followup(s: AsyncSession, followup_id: uuid.UUID) -> Followup | None:
    """One follow-up by id (tests, logs)."""
    return await s.get(Followup, followup_id)
