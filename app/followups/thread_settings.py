"""PATCH a thread: its title and its autonomy, in one transaction. Store what the user set,
answer the thread with its effective autonomy; turning autonomy off cancels the pending
follow-up in the same transaction."""

from __future__ import annotations

import uuid
from typing import Any

from app.config.settings import Settings
from app.followups import repository as followup_store
from app.followups.autonomy import Autonomy, effective
from app.store.db import Database
from app.threads import repository as thread_store


def default_autonomy(settings: Settings) -> Autonomy:
    """The operator's defaults (off unless CHATGATE_AUTONOMY_ENABLED)."""
    return Autonomy(enabled=settings.autonomy_enabled,
                    idle_seconds=settings.autonomy_idle_seconds,
                    max_followups=settings.autonomy_max_followups)


async def update_thread(
    db: Database, user_id: str, thread_id: uuid.UUID, *, defaults: Autonomy,
    title: str | None = None, autonomy: dict[str, Any] | None = None,
) -> dict[str, Any] | None:
    """Apply the validated changes (None: leave that field alone); the thread with its
    effective autonomy, or None when it is not the user's."""
    async with db.transaction() as session:
        thread = await thread_store.get_thread(session, user_id, thread_id)
        if thread is None:
            return None
        if title is not None:
            await thread_store.set_title(session, thread.id, title)
            await session.refresh(thread)
        if autonomy is not None:
            thread = await thread_store.set_autonomy(session, user_id, thread_id, autonomy)
            if thread is None:
                return None
        result = effective(thread.autonomy, defaults)
        if autonomy is not None and not result.enabled:
            await followup_store.cancel_pending_for_thread(session, thread.id)
    return {"id": str(thread.id), "title": thread.title, "autonomy": result.as_json()}
