"""Persistence: all SQL of the gateway lives in this package (see docs/architecture.md)."""

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
from app.store.records import ThreadSummary

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
