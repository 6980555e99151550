"""Single message rows as any gateway may have stored them, written past the store's API
(which would clean them): the repair run and repository tests build their cases with these."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

from sqlalchemy import insert

from app.store.db import Database
from app.store.models import Message, Thread

START = dt.datetime(2025, 3, 1, tzinfo=dt.UTC)
UNCLOSED = '<!-- METADATA: {"language": "cs"}Aha, chápu...'


async def add_thread(db: Database, user_id: str = "alice") -> uuid.UUID:
    thread_id = uuid.uuid4()
    async with db.transaction() as s:
        await s.execute(insert(Thread), [{"id": thread_id, "user_id": user_id, "autonomy": {},
                                          "created_at": START, "updated_at": START}])
    return thread_id


async def add_message(
    db: Database, thread_id: uuid.UUID, content: str, *, role: str = "assistant",
    metadata: dict[str, Any] | None = None, status: str = "complete", user_id: str = "alice",
    at: dt.datetime = START, synthetic: bool = False, trigger_type: str | None = None,
    reasoning: str | None = None,
) -> uuid.UUID:
    message_id = uuid.uuid4()
    async with db.transaction() as s:
        await s.execute(insert(Message), [{
            "id": message_id, "thread_id": thread_id, "user_id": user_id, "role": role,
            "content": content, "meta": metadata or {}, "status": status,
            "synthetic": synthetic, "trigger_type": trigger_type, "created_at": at,
            "reasoning": reasoning,
            "updated_at": at, "completed_at": None if status == "streaming" else at,
        }])
    return message_id


async def load(db: Database, message_id: uuid.UUID) -> Message:
    async with db.transaction() as s:
        row = await s.get(Message, message_id)
        assert row is not None
        return row
