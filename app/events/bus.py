"""Fan-out of message notices to the event streams open in this process.

`announce_after_commit` runs once the transaction that stored a turn's messages committed
(a subscriber that re-reads the rows sees them): the local bus delivers then; the Redis bus
publishes then, to every process subscribed, this one included; the PostgreSQL bus (several
processes without Redis) sends a NOTIFY then, which PostgreSQL delivers to every process
LISTENing, this one included."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Coroutine, Iterator
from typing import Any

import redis.asyncio as aioredis

from app.core.clock import Clock, utcnow
from app.events.notices import CHANNEL, MessageNotice, decode_notice, encode_notice
from app.kit import redis_channel
from app.kit.keyed_sets import KeyedSets
from app.kit.outage_log import OutageLog
from app.kit.redis_channel import REDIS_ERRORS
from app.observe.logging import get_logger
from app.store import notify
from app.store.db import Database, DatabaseTimeouts

log = get_logger("events.bus")

#: Notices a slow subscriber may have waiting before newer ones are dropped for it.
QUEUE_SIZE = 100
DEFAULT_TIMEOUTS = DatabaseTimeouts()
#: How often the PostgreSQL listener checks that its connection is still alive.
LISTENER_CHECK_S = 2.0
#: How long a stopping process waits for its last notices to go.
SEND_GRACE_S = 2.0


class MessageBus:
    """Subscribers per thread, each with its own queue."""

    def __init__(self) -> None:
        self._subscribers: KeyedSets[uuid.UUID, asyncio.Queue[MessageNotice]] = KeyedSets()
        #: Notices on their way to the other processes (sent after commit, not awaited by
        #: the turn that announced them).
        self._sending: set[asyncio.Task[None]] = set()

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

    def deliver_payload(self, payload: str) -> None:
        """A notice as another process sent it (a NOTIFY's or a Redis message's payload)."""
        notice = decode_notice(payload)
        if notice is None:
            log.warning("message_bus_bad_payload", payload=payload[:200])
            return
        self.deliver(notice)

    async def start(self) -> None:
        """Connect what the bus needs (nothing in process)."""

    async def stop(self) -> None:
        """Release what start took."""

    def announce_after_commit(self, notice: MessageNotice) -> None:
        """After the transaction that stored the notice's messages committed."""

    def _send_later(self, sending: Coroutine[Any, Any, None]) -> None:
        """Send a notice to the other processes without holding up the turn."""
        task = asyncio.create_task(sending)
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _sent(self) -> None:
        """The notices still on their way, given a moment to go (a stopping process)."""
        if self._sending:
            await asyncio.wait(set(self._sending), timeout=SEND_GRACE_S)


class LocalMessageBus(MessageBus):
    """SQLite: one process, delivered after commit."""

    def announce_after_commit(self, notice: MessageNotice) -> None:
        self.deliver(notice)


class PostgresMessageBus(MessageBus):
    """PostgreSQL: a NOTIFY once the messages are committed (app.store.notify says why not in
    their transaction), LISTEN on a connection of our own (from `listen_db`, a direct
    connection where `db` goes through a transaction pooler); the listener is re-opened when
    its connection dies (notices sent meanwhile are lost: the page reloads the history when
    its stream reconnects)."""

    def __init__(self, db: Database, channel: str = CHANNEL, *,
                 listen_db: Database | None = None, clock: Clock = utcnow) -> None:
        super().__init__()
        self._db, self._listen_db = db, listen_db
        self._channel = channel
        self._listener: notify.Listener | None = None
        self._watch: asyncio.Task[None] | None = None
        self._outage = OutageLog("message_bus_failed", "message_bus_recovered",
                                 component="events.bus", clock=clock)

    async def start(self) -> None:
        await self._listen()
        self._watch = asyncio.create_task(self._keep_listening(), name="message_bus_listener")

    async def stop(self) -> None:
        await self._sent()
        await _cancelled(self._watch)
        self._watch = None
        if self._listener is not None:
            with contextlib.suppress(Exception):
                await self._listener.close()
            self._listener = None
        if self._listen_db is not None:
            await self._listen_db.dispose()

    def announce_after_commit(self, notice: MessageNotice) -> None:
        self._send_later(self._notify(notify.Notification(self._channel,
                                                          encode_notice(notice))))

    async def _notify(self, notification: notify.Notification) -> None:
        try:
            await notify.send(self._db, notification)
            self._outage.succeeded()
        except Exception as exc:
            self._outage.failed("notify", exc)

    async def _listen(self) -> None:
        self._listener = await notify.open_listener(self._listen_db or self._db, self._channel,
                                                    self.deliver_payload)
        log.info("message_bus_listening", channel=self._channel)

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


class RedisMessageBus(MessageBus):
    """Several processes with Redis: each notice published on a Redis channel once its
    messages are committed, and every process (this one included) subscribed to it: no
    NOTIFY, and no LISTEN connection (which a transaction pooler cannot carry). At most once,
    as NOTIFY is to a listener that reconnects: the page reloads the history when its stream
    reconnects."""

    def __init__(self, url: str, *, prefix: str, clock: Clock = utcnow) -> None:
        super().__init__()
        self._client: aioredis.Redis = aioredis.Redis.from_url(
            url, socket_timeout=5.0, socket_connect_timeout=1.0)
        self._channel = f"{prefix}:thread-messages"
        self._outage = OutageLog("message_bus_failed", "message_bus_recovered",
                                 component="events.bus", clock=clock)
        self._listening: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._listening = asyncio.create_task(redis_channel.listen(
            self._client, self._channel, self.deliver_payload, self._outage, what="listen"))

    async def stop(self) -> None:
        await self._sent()
        await _cancelled(self._listening)
        await self._client.aclose()

    def announce_after_commit(self, notice: MessageNotice) -> None:
        self._send_later(self._publish(encode_notice(notice)))

    async def _publish(self, payload: str) -> None:
        try:
            await self._client.publish(self._channel, payload)
            self._outage.succeeded()
        except REDIS_ERRORS as exc:
            self._outage.failed("publish", exc)


async def _cancelled(task: asyncio.Task[None] | None) -> None:
    """A listening task cancelled and over."""
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def make_message_bus(db: Database, *, listen_url: str | None = None,
                     redis_url: str | None = None, redis_prefix: str = "chatgate",
                     timeouts: DatabaseTimeouts = DEFAULT_TIMEOUTS) -> MessageBus:
    """Across processes when the database carries notifications, else within this one:
    through Redis when it is configured (`redis_url`), else with PostgreSQL's NOTIFY. With
    `listen_url` (a direct connection to the server, where `db` goes through a transaction
    pooler, which cannot keep a LISTEN), the listener's connection is opened there, from a
    pool of its own."""
    if not db.notifies:
        return LocalMessageBus()
    if redis_url is not None:
        return RedisMessageBus(redis_url, prefix=redis_prefix)
    if listen_url is None:
        return PostgresMessageBus(db)
    return PostgresMessageBus(db, listen_db=Database(listen_url, postgres_pool_size=1,
                                                     timeouts=timeouts))
