"""Errors the store raises and the API maps to HTTP statuses."""

from __future__ import annotations


class StoreError(Exception):
    """Base class of the store's own errors."""


class ThreadBusy(StoreError):
    """The thread already has an assistant message `streaming` (API: 409)."""


class ContentTooLong(StoreError):
    """Content longer than the limit; refused before it reaches the database (API: 413)."""

    def __init__(self, length: int, limit: int) -> None:
        super().__init__(f"content is {length} characters; the limit is {limit}")
        self.length = length
        self.limit = limit


class MessageNotFound(StoreError):
    """No message with that id (finish of an unknown id is a programming error)."""


class MessageAlreadyFinished(StoreError):
    """A turn's finish ran twice for one message; the second would double-count usage."""


class IntegrityCheckFailed(StoreError):
    """The start-up round trip of synthetic metadata lost or altered something."""


class DatabaseUnavailable(StoreError):
    """The database cannot be reached or used right now (refused, lost or timed-out
    connection, server starting or stopping, SQLite locked past its busy timeout). Raised by
    `Database.transaction()` in place of the driver's error, which is its `__cause__`; the
    API answers 503 `database_unavailable` with Retry-After. Transient by nature: the next
    transaction tries a fresh connection."""


class DatabaseBusy(DatabaseUnavailable):
    """Every connection of this process's pool was in use for the pool's whole checkout
    timeout: the database answers, this process has more transactions than connections
    (an overload, not an outage). A turn being opened is refused 503 `gateway_busy`; any
    other request gets the 503 `database_unavailable` it got before."""
