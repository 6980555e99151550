"""One client's event stream for a thread: subscribe, then for each notice re-read the new
messages (scoped by user, visible ones only) and hand them out in the API's message shape.

This is a use case, not infrastructure: it decides what a user may see and shapes it like the
history does (app.threads.service.message_json), so it lives with the services; app/events
keeps only the bus that carries the notices."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncGenerator, Callable, Iterator
from typing import Any

from app.api.event_stream import ShutdownWatch
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


#: The last event of a thread's events stream when its process shuts down: the page
#: reconnects, to another process.
SHUTTING_DOWN_EVENT = ("error", {"code": "shutting_down",
                                 "message": "this gateway process is shutting down; "
                                            "connect again"})


async def thread_events(
    bus: MessageBus, db: Database, user_id: str, thread_id: uuid.UUID,
    shutdown: ShutdownWatch | None = None,
) -> AsyncGenerator[tuple[str, dict[str, Any]], None]:
    """(event name, data) pairs: `ready` once subscribed, then `message` {"message": ...}
    for each new visible message, until the client leaves; once the process begins
    shutting down, `error` `shutting_down` and the end of the stream (instead of the cut the
    server's grace would make, without a word)."""
    stopping = asyncio.Event()
    with bus.subscribe(thread_id) as queue, (shutdown or _unwatched)(stopping.set):
        log.info("thread_events_open", thread_id=str(thread_id))
        stopped = asyncio.ensure_future(stopping.wait())
        try:
            yield "ready", {"thread_id": str(thread_id)}
            while True:
                notice = await _next(queue, stopped)
                if notice is None:
                    yield SHUTTING_DOWN_EVENT
                    return
                for message in await visible_messages(db, user_id, notice):
                    yield "message", {"message": message}
        finally:
            stopped.cancel()
            log.info("thread_events_closed", thread_id=str(thread_id))


async def _next(queue: asyncio.Queue[MessageNotice], stopped: asyncio.Future[Any]
                ) -> MessageNotice | None:
    """The next notice, or None once `stopped` is done (a task only while waiting: a notice
    already queued is taken at once)."""
    if not queue.empty() or stopped.done():
        return None if stopped.done() else queue.get_nowait()
    getting = asyncio.ensure_future(queue.get())
    try:
        await asyncio.wait((getting, stopped), return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not getting.done():
            getting.cancel()
    return getting.result() if getting.done() and not getting.cancelled() else None


@contextlib.contextmanager
def _unwatched(_callback: Callable[[], None]) -> Iterator[None]:
    """No shutdown to hear of (a caller without one)."""
    yield
