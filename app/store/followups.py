"""Follow-ups: only what persistence needs now (scheduling one and cancelling pending ones).
The claiming worker belongs to the follow-up work and adds its functions here."""

from __future__ import annotations

import datetime as dt
import uuid

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from app.store.models import Followup
from app.store.types import utcnow


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


async def cancel_pending_for_thread(s: AsyncSession, thread_id: uuid.UUID) -> int:
    """Cancel the thread's pending follow-ups (a real user message arrived); returns how many."""
    result = await s.execute(
        update(Followup)
        .where(Followup.thread_id == thread_id, Followup.status == "pending")
        .values(status="cancelled", finished_at=utcnow())
    )
    return int(result.rowcount)  # type: ignore[attr-defined]


async def list_followups(s: AsyncSession, thread_id: uuid.UUID) -> list[Followup]:
    """A thread's follow-ups, oldest first."""
    result = await s.execute(
        select(Followup).where(Followup.thread_id == thread_id)
        .order_by(Followup.created_at, Followup.id)
    )
    return list(result.scalars())
