"""The new-visible-message bus: tells open `GET /api/threads/{id}/events` streams that a thread
has new messages. In process on SQLite; across processes via PostgreSQL LISTEN/NOTIFY."""

from app.events.bus import LocalMessageBus, MessageBus, PostgresMessageBus, make_message_bus
from app.events.notices import MessageNotice

__all__ = [
    "LocalMessageBus",
    "MessageBus",
    "MessageNotice",
    "PostgresMessageBus",
    "make_message_bus",
]
