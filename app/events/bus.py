"""Fan-out of message notices to the event streams open in this process.

`notification` is what the statement that stores the messages sends with them, and
`announce_after_commit` runs after their transaction commits: the local bus delivers after
commit (a subscriber that re-reads the rows sees them); the PostgreSQL bus has the statement
send a NOTIFY, which PostgreSQL delivers at commit to every process LISTENing, this one
included."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Iterator

from app.events.notices import CHANNEL, MessageNotice, decode_notice, encode_notice
from app.kit.keyed_sets import KeyedSets
from app.observe.logging import get_logger
from app.store import notify
from app.store.db import Database, DatabaseTimeouts

log = get_logger("events.bus")

#: Notices a slow subscriber may have waiting before newer ones are dropped for it.
QUEUE_SIZE = 100
DEFAULT_TIMEOUTS = DatabaseTimeouts()
#: How often the PostgreSQL listener checks that its connection is still alive.
LISTENER_CHECK_S = 2.0


class MessageBus:
    """Subscribers per thread, each with its own queue."""

    def __init__(self) -> None:
        self._subscribers: KeyedSets[uuid.UUID, asyncio.Queue[MessageNotice]] = KeyedSets()

    @contextlib.contextmanager
    def subscribe(self, thread_id: uuid.UUID) -> Iterator[asyncio.Queue[MessageNotice]]:
        """A queue of the thread's notices for as long as the block runs."""
        queue: asyncio.Queue[MessageNotice] = asyncio.Queue(QUEUE_SIZE)
        with self._subscribers.member(thread_id, queue):
            yield queue

    def subscriber_count(self, thread_id: uuid.UUID) -> int:
        return self._subscribers.count(thread_id)

    def deliver(self, notice: MessageNotice) -> None:
        for queue in self._subscribers.members(notice.thread_id):
            try:
                queue.put_nowait(notice)
            except asyncio.QueueFull:
                log.warning("event_subscriber_lagging", thread_id=str(notice.thread_id))

    async def start(self) -> None:
        """Connect what the bus needs (nothing in process)."""

    async def stop(self) -> None:
        """Release what start took."""

    def notification(self, notice: MessageNotice) -> notify.Notification | None:
        """The NOTIFY for the statement that stores the notice's messages to send, if any."""
        return None

    def announce_after_commit(self, notice: MessageNotice) -> None:
        """After that transaction committed."""


class LocalMessageBus(MessageBus):
    """SQLite: one process, delivered after commit."""

    def announce_after_commit(self, notice: MessageNotice) -> None:
        self.deliver(notice)


class PostgresMessageBus(MessageBus):
    """PostgreSQL: NOTIFY with the stored messages, LISTEN on a connection of our own; the
    listener is re-opened when its connection dies (notices sent meanwhile are lost: the page
    reloads the history when its stream reconnects)."""

    def __init__(self, db: Database, channel: str = CHANNEL, *, owns_db: bool = False) -> None:
        super().__init__()
        self._db, self._owns_db = db, owns_db
        self._channel = channel
        self._listener: notify.Listener | None = None
        self._watch: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self._listen()
        self._watch = asyncio.create_task(self._keep_listening(), name="message_bus_listener")

    async def stop(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch
            self._watch = None
        if self._listener is not None:
            with contextlib.suppress(Exception):
                await self._listener.close()
            self._listener = None
        if self._owns_db:
            await self._db.dispose()

    def notification(self, notice: MessageNotice) -> notify.Notification:
        return notify.Notification(self._channel, encode_notice(notice))

    async def _listen(self) -> None:
        self._listener = await notify.open_listener(self._db, self._channel, self._on_payload)
        log.info("message_bus_listening", channel=self._channel)

    def _on_payload(self, payload: str) -> None:
        notice = decode_notice(payload)
        if notice is None:
            log.warning("message_bus_bad_payload", payload=payload[:200])
            return
        self.deliver(notice)

    async def _keep_listening(self) -> None:
        while True:
            await asyncio.sleep(LISTENER_CHECK_S)
            if self._listener is not None and not self._listener.is_closed:
                continue
            log.warning("message_bus_listener_lost", channel=self._channel)
            try:
                if self._listener is not None:
                    with contextlib.suppress(Exception):
                        await self._listener.close()
                    self._listener = None
                await self._listen()
            except Exception as exc:
                log.warning("message_bus_relisten_failed", error=type(exc).__name__)


def make_message_bus(db: Database, *, listen_url: str | None = None,
                     timeouts: DatabaseTimeouts = DEFAULT_TIMEOUTS) -> MessageBus:
    """Across processes when the database carries notifications, else within this one. With
    `listen_url` (a direct connection to the server, where `db` goes through a transaction
    pooler, which cannot keep a LISTEN), the listener's connection is opened there, from a
    pool of its own."""
    if not db.notifies:
        return LocalMessageBus()
    if listen_url is None:
        return PostgresMessageBus(db)
    return PostgresMessageBus(Database(listen_url, postgres_pool_size=1, timeouts=timeouts),
                              owns_db=True)
