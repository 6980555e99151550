"""One client's event stream for a thread: subscribe, then for each notice re-read the new
messages (scoped by user, visible ones only) and hand them out in the API's message shape.

This is a use case, not infrastructure: it decides what a user may see and shapes it like the
history does (app.threads.service.message_json), so it lives with the services; app/events
keeps only the bus that carries the notices."""

from __future__ import annotations

import uuid
from collections.abc import AsyncGenerator
from typing import Any

from app.events.bus import MessageBus
from app.events.notices import MessageNotice
from app.observe.logging import get_logger
from app.store.db import Database
from app.store.visibility import is_hidden
from app.threads import repository as thread_store
from app.threads.service import message_json

log = get_logger("services.thread_events")


async def thread_is_users(db: Database, user_id: str, thread_id: uuid.UUID) -> bool:
    """The thread exists and is the user's (anything else is the same 404)."""
    async with db.transaction(read_only=True) as session:
        return await thread_store.get_thread(session, user_id, thread_id) is not None


async def visible_messages(
    db: Database, user_id: str, notice: MessageNotice
) -> list[dict[str, Any]]:
    """The notice's messages the user may see, settled (not streaming), in notice order."""
    found: list[dict[str, Any]] = []
    async with db.transaction(read_only=True) as session:
        for message_id in notice.message_ids:
            message = await thread_store.get_message(session, user_id, message_id)
            if message is None or message.thread_id != notice.thread_id:
                continue
            if is_hidden(message) or message.status == "streaming":
                continue
            found.append(message_json(message))
    return found


async def thread_events(
    bus: MessageBus, db: Database, user_id: str, thread_id: uuid.UUID
) -> AsyncGenerator[tuple[str, dict[str, Any]], None]:
    """(event name, data) pairs: `ready` once subscribed, then `message` {"message": ...}
    for each new visible message, until the client leaves."""
    with bus.subscribe(thread_id) as queue:
        log.info("thread_events_open", thread_id=str(thread_id))
        try:
            yield "ready", {"thread_id": str(thread_id)}
            while True:
                notice = await queue.get()
                for message in await visible_messages(db, user_id, notice):
                    yield "message", {"message": message}
        finally:
            log.info("thread_events_closed", thread_id=str(thread_id))
