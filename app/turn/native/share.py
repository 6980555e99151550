"""What crosses gateway processes about a running turn, through Redis (`CHATGATE_REDIS_URL`),
so that a client resumes, or stops, a turn on whichever process its request reaches:

- the turn's log, mirrored into a Redis Stream `<prefix>:turn:<message id>:log` by the owning
  process (one pipelined XADD batch per wakeup, not one round trip per delta), entry id
  `<position>-1`, capped at `max_events` entries (approximate MAXLEN), expiring `keep_s`
  after its last write;
- the readers of other processes, each refreshing `<prefix>:turn:<message id>:readers`
  (a short-lived key) while it follows, so the owner does not end the turn for lack of a
  reader while one is reading elsewhere;
- stop requests, published on `<prefix>:turn-stops`; every process listens and the owner
  stops its turn. A request is the message id, followed by a space and the reason
  (app.answer.interruptions) when it is not a user's Stop (a revoked key seen by a reader
  on another process): what the stopped turn's row says.

A Redis failure costs only the cross-process part: the owner keeps streaming to its own
readers, and logs `turn_share_failed` (once a minute at most while Redis stays down, with a
count of what failed: app.kit.outage_log), then `turn_share_recovered`. A mirror retries
its failed write (every `retry_s`) rather than give up, so the turns of an outage, and the
first one after it (whose first write may meet a connection Redis dropped), are mirrored
once Redis answers again."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import orjson
import redis.asyncio as aioredis

from app.answer.event_codec import event_from_json, event_to_json, is_last
from app.answer.events import TurnEvent
from app.answer.interruptions import STOP_REQUEST
from app.core.clock import Clock, utcnow
from app.kit import redis_channel
from app.kit.outage_log import OutageLog
from app.kit.redis_channel import REDIS_ERRORS, RETRY_S
from app.observe.logging import get_logger
from app.turn.native.event_log import LogTrimmed, TurnLog

log = get_logger("services.turn_share")

#: A follower waits this long per XREAD (and refreshes its presence as often).
FOLLOW_BLOCK_MS = 1000
#: A follower's presence outlives its last refresh by this much.
PRESENCE_TTL_MS = 3000
#: After this many silent XREADs, a follower asks whether the answer is still streaming.
SILENT_ROUNDS_PER_CHECK = 5
#: Attempts a mirror still makes once its turn is over (its last events), so that a Redis
#: that stays down holds no finished turn's mirror (nor the shutdown) for long.
ATTEMPTS_AFTER_END = 3


def position_id(position: int) -> str:
    """The stream entry id of a log position (ids must be above 0-0)."""
    return f"{position}-1"


def id_position(entry_id: bytes | str) -> int:
    text = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
    return int(text.split("-", 1)[0])


class SharedTurns:
    """The Redis side of turn logs, presence and stop requests for one process."""

    def __init__(self, url: str, *, prefix: str, keep_s: float, max_events: int,
                 follow_block_ms: int = FOLLOW_BLOCK_MS, retry_s: float = RETRY_S,
                 clock: Clock = utcnow) -> None:
        self.client: aioredis.Redis = aioredis.Redis.from_url(
            url, socket_timeout=follow_block_ms / 1000 + 4.0, socket_connect_timeout=1.0)
        self.prefix, self.keep_s, self.max_events = prefix, keep_s, max_events
        self.follow_block_ms, self.retry_s = follow_block_ms, retry_s
        #: Every Redis failure of this process goes through here (resumes' too).
        self.outage = OutageLog("turn_share_failed", "turn_share_recovered",
                                component="services.turn_share", clock=clock)

    def log_key(self, message_id: uuid.UUID) -> str:
        return f"{self.prefix}:turn:{message_id}:log"

    def readers_key(self, message_id: uuid.UUID) -> str:
        return f"{self.prefix}:turn:{message_id}:readers"

    @property
    def stop_channel(self) -> str:
        return f"{self.prefix}:turn-stops"

    async def mirror(self, message_id: uuid.UUID, turn_log: TurnLog) -> None:
        """Copy the log into its Redis Stream as it grows, until it is closed. A failed
        write is tried again at once (a pooled connection Redis dropped while it was away
        fails the first command after its return), then every `retry_s`, from what the
        stream holds (a batch may have been half written, or Redis restarted empty), while
        the turn runs and ATTEMPTS_AFTER_END times after."""
        key, position, failures, failed_after_end = self.log_key(message_id), 0, 0, 0
        while True:
            await turn_log.wait(position)
            try:
                if failures:
                    position = max(await self._written_up_to(key), turn_log.first)
                events = turn_log.read(position)
                if events:
                    await self._write(key, position, events)
            except LogTrimmed:
                position = turn_log.first
                continue
            except REDIS_ERRORS as exc:
                self.outage.failed("mirror", exc, message_id=str(message_id))
                failed_after_end += turn_log.closed
                if failed_after_end >= ATTEMPTS_AFTER_END:
                    return
                failures += 1
                await asyncio.sleep(self.retry_s if failures > 1 else 0)
                continue
            if not events:
                if turn_log.closed:
                    return  # everything is written
                continue
            self.outage.succeeded()
            position, failures = position + len(events), 0

    async def _written_up_to(self, key: str) -> int:
        """The position after the last one the stream holds (0 without a stream)."""
        last: Any = await self.client.xrevrange(key, count=1)
        return id_position(last[0][0]) + 1 if last else 0

    async def _write(self, key: str, position: int, events: list[TurnEvent]) -> None:
        async with self.client.pipeline(transaction=False) as pipe:
            for offset, event in enumerate(events):
                pipe.xadd(key, {"e": orjson.dumps(event_to_json(event))},
                          id=position_id(position + offset), maxlen=self.max_events,
                          approximate=True)
            pipe.expire(key, max(1, round(self.keep_s)))
            await pipe.execute()

    async def span(self, message_id: uuid.UUID) -> tuple[int, int] | None:
        """The first and last positions the shared log holds, or None without one."""
        key = self.log_key(message_id)
        first: Any = await self.client.xrange(key, count=1)
        last: Any = await self.client.xrevrange(key, count=1)
        if not first or not last:
            return None
        return id_position(first[0][0]), id_position(last[0][0])

    async def follow(self, message_id: uuid.UUID, start: int,
                     streaming: Callable[[], Awaitable[bool]]) -> AsyncIterator[TurnEvent]:
        """The events from `start` on, live, up to the closing one. Returns early (without
        a closing event) when the log is gone or the answer is no longer streaming while
        the log stays silent: its owner died, and the stored row is what is left."""
        key, silent = self.log_key(message_id), 0
        cursor: bytes | str = position_id(start - 1) if start > 0 else "0-0"
        while True:
            await self.client.set(self.readers_key(message_id), 1, px=PRESENCE_TTL_MS)
            reply: Any = await self.client.xread({key: cursor}, count=500,
                                                 block=self.follow_block_ms)
            if not reply:
                silent += 1
                if silent % SILENT_ROUNDS_PER_CHECK == 0 and (
                        not await self.client.exists(key) or not await streaming()):
                    return
                continue
            silent = 0
            for entry_id, fields in reply[0][1]:
                cursor = entry_id
                event = event_from_json(orjson.loads(fields[b"e"]))
                yield event
                if is_last(event):
                    return

    async def read_elsewhere(self, message_id: uuid.UUID) -> bool:
        """A process other than the owner has a reader of this turn right now."""
        try:
            found = bool(await self.client.exists(self.readers_key(message_id)))
        except REDIS_ERRORS as exc:
            self.outage.failed("presence", exc, message_id=str(message_id))
            return False
        self.outage.succeeded()
        return found

    async def request_stop(self, message_id: uuid.UUID, reason: str = STOP_REQUEST) -> None:
        """Ask the turn's owner to stop it, for `reason`. A user's Stop is the bare id, as
        it always was: a process of an earlier version still understands it."""
        data = str(message_id) if reason == STOP_REQUEST else f"{message_id} {reason}"
        await self.client.publish(self.stop_channel, data)

    async def listen_for_stops(self, on_stop: Callable[[uuid.UUID, str], object]) -> None:
        """Call `on_stop` with the id and the reason of each stop request of any process,
        until cancelled; a lost connection is retried every `retry_s`."""
        await redis_channel.listen(self.client, self.stop_channel,
                                   lambda data: _stop_one(on_stop, data), self.outage,
                                   what="stops", retry_s=self.retry_s)

    async def aclose(self) -> None:
        await self.client.aclose()


def _stop_one(on_stop: Callable[[uuid.UUID, str], object], text: str) -> None:
    raw_id, _, reason = text.partition(" ")
    try:
        message_id = uuid.UUID(raw_id)
    except ValueError:
        log.warning("turn_stop_ignored", reason="not_a_message_id")
        return
    on_stop(message_id, reason or STOP_REQUEST)
