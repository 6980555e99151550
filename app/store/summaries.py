"""Plain records the store returns (no SQLAlchemy state inside)."""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ThreadSummary:
    """A row of the thread list: counts and preview ignore synthetic messages."""

    id: uuid.UUID
    title: str | None
    message_count: int
    preview: str | None
    updated_at: dt.datetime
    created_at: dt.datetime
    #: The model the thread's last turn chose (None: the default).
    model: str | None = None
    #: Where the thread came from (app.store.models.THREAD_ORIGINS).
    origin: str = "chat"
