"""Follow-ups: only what persistence needs now (scheduling one and cancelling pending ones).
The claiming worker belongs to the follow-up work and adds its functions here."""

from __future__ import annotations

import datetime as dt
import uuid

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from app.core.clock import utcnow
from app.store.models import Followup
from app.turn.rows.statements import cancel_pending_statement


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



async def list_followups(s: AsyncSession, thread_id: uuid.UUID) -> list[Followup]:
    """A thread's follow-ups, oldest first."""
    result = await s.execute(
        select(Followup).where(Followup.thread_id == thread_id)
        .order_by(Followup.created_at, Followup.id)
    )
    return list(result.scalars())
