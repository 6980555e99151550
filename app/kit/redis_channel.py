"""A Redis pub/sub channel listened to for as long as a process runs: each message handed
on as it arrives, a lost connection tried again every `retry_s`, the outage logged once a
minute (app.kit.outage_log). Pub/sub is at most once: what is published while a listener is
away is not delivered to it, so what listens here must bear a lost message."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import redis.asyncio as aioredis
import redis.exceptions

from app.kit.outage_log import OutageLog

REDIS_ERRORS = (redis.exceptions.RedisError, OSError)
#: The pause before a lost subscription is tried again.
RETRY_S = 1.0


async def listen(client: aioredis.Redis, channel: str, on_data: Callable[[str], object],
                 outage: OutageLog, *, what: str, retry_s: float = RETRY_S) -> None:
    """Call `on_data` with each message's text on `channel`, until cancelled."""
    while True:
        try:
            async with client.pubsub() as pubsub:
                await pubsub.subscribe(channel)
                outage.succeeded()
                while True:
                    message = await pubsub.get_message(ignore_subscribe_messages=True,
                                                       timeout=1.0)
                    if message is not None and message["type"] == "message":
                        data = message["data"]
                        on_data(data.decode(errors="replace") if isinstance(data, bytes)
                                else str(data))
        except REDIS_ERRORS as exc:
            outage.failed(what, exc)
            await asyncio.sleep(retry_s)
