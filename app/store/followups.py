"""Follow-ups: only what persistence needs now (scheduling one and cancelling pending ones).
The claiming worker belongs to the follow-up work and adds its functions here."""

from __future__ import annotations

import datetime as dt
import functools
import uuid

from sqlalchemy import Update, bindparam, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from app.clock import utcnow
from app.store.models import Followup, table_of


async def schedule_followup(
    s: AsyncSession, *, thread_id: uuid.UUID, user_id: str, trigger_type: str, reason: str,
    due_at: dt.datetime,
) -> Followup:
    """A pending follow-up for the thread, due at due_at."""
    followup = Followup(
        id=uuid.uuid4(), thread_id=thread_id, user_id=user_id, trigger_type=trigger_type,
        reason=reason, due_at=due_at, status="pending", attempts=0, created_at=utcnow(),
    )
    s.add(followup)
    await s.flush()
    return followup


async def cancel_pending_for_thread(
    s: AsyncSession, thread_id: uuid.UUID, *, claimed_too: bool = False
) -> int:
    """Cancel the thread's pending follow-ups; returns how many. A real user message cancels
    claimed ones too (`claimed_too`): a worker that claimed one but has not stored its prompt
    finds the claim cancelled under the thread lock and stands down, whatever the clocks of
    the two processes say. (One already streaming holds the thread: the user gets 409.)"""
    result = await s.execute(cancel_pending_statement(claimed_too),
                             {"of_thread": thread_id, "now": utcnow()})
    return int(result.rowcount)  # type: ignore[attr-defined]


@functools.cache
def cancel_pending_statement(claimed_too: bool) -> Update:
    """cancel_pending_for_thread's statement, its parameters `of_thread` and `now`. Built once
    each way: a real user message runs it on every turn (on PostgreSQL inside the opening's
    statement, app.store.messages)."""
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


async def list_followups(s: AsyncSession, thread_id: uuid.UUID) -> list[Followup]:
    """A thread's follow-ups, oldest first."""
    result = await s.execute(
        select(Followup).where(Followup.thread_id == thread_id)
        .order_by(Followup.created_at, Followup.id)
    )
    return list(result.scalars())
