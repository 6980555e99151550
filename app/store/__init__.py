"""The database kit: the engine and its transactions, the schema, the drivers and the
migrations that every domain's repository builds on (docs/schema.md, *Store conventions*)."""

from app.store.db import Database
from app.store.errors import (
    ContentTooLong,
    IntegrityCheckFailed,
    MessageAlreadyFinished,
    MessageNotFound,
    StoreError,
    ThreadBusy,
)
from app.store.models import Message, Thread
from app.store.summaries import ThreadSummary

__all__ = [
    "ContentTooLong",
    "Database",
    "IntegrityCheckFailed",
    "Message",
    "MessageAlreadyFinished",
    "MessageNotFound",
    "StoreError",
    "Thread",
    "ThreadBusy",
    "ThreadSummary",
]
