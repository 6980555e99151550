"""Plain records the repair rules work on (no SQLAlchemy state: the rules stay pure)."""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """One message row as the store holds it, the fields the rules read."""

    id: uuid.UUID
    thread_id: uuid.UUID
    user_id: str
    role: str
    content: str
    metadata: Any
    """The decoded JSON document; legacy rows may hold something other than an object."""
    synthetic: bool
    trigger_type: str | None
    created_at: dt.datetime


@dataclass(frozen=True, slots=True)
class ScanFilter:
    """Which messages a scan looks at; None means no restriction."""

    thread_id: uuid.UUID | None = None
    user_id: str | None = None
    since: dt.datetime | None = None
