"""Where the rate limit counts a user's turn requests of a minute window: the database (the
default; nothing but SQLite needed) or Redis (`CHATGATE_REDIS_URL`: no write transaction per
turn request, which matters on SQLite and spares PostgreSQL a hot row per active user).

Both answer one question atomically: may one more request of this user enter this window
under `limit`? A refused request is not counted."""

from __future__ import annotations

import datetime as dt
from typing import Protocol

import redis.asyncio as aioredis
import redis.exceptions

from app.keys import limits_repository as limit_store
from app.observe.logging import get_logger
from app.store.db import Database

log = get_logger("store.rate_windows")

#: Redis keys live two windows: long enough for the window they count, then they go.
REDIS_KEY_TTL_S = 120
REDIS_KEY_PREFIX = "chatgate:rate"


class RateWindows(Protocol):
    async def take(self, user_id: str, window_start: dt.datetime, limit: int) -> bool:
        """Count one request if the window has room (True); else count nothing (False)."""

    async def aclose(self) -> None:
        """Release connections (the application's shutdown)."""


class DatabaseRateWindows:
    """rate_limit_windows rows: one atomic upsert per request, on PostgreSQL one statement
    and no transaction (a round trip instead of four)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def take(self, user_id: str, window_start: dt.datetime, limit: int) -> bool:
        async with self.db.one_statement() as runner:
            return await limit_store.take_request(runner, user_id, window_start, limit)

    async def aclose(self) -> None:
        return None


class RedisRateWindows:
    """A key per (user, window): INCR, and DECR again when over the limit. Two requests
    racing at the limit may both be refused (each saw the other's increment): erring on the
    strict side for an instant is fine for a rate limit. When Redis cannot be reached the
    request is let through and a warning logged: a limiter outage must not stop every chat."""

    def __init__(self, url: str, *, prefix: str = REDIS_KEY_PREFIX) -> None:
        self.client: aioredis.Redis = aioredis.Redis.from_url(
            url, socket_timeout=1.0, socket_connect_timeout=1.0)
        self.prefix = prefix

    def key(self, user_id: str, window_start: dt.datetime) -> str:
        return f"{self.prefix}:{int(window_start.timestamp())}:{user_id}"

    async def take(self, user_id: str, window_start: dt.datetime, limit: int) -> bool:
        key = self.key(user_id, window_start)
        try:
            async with self.client.pipeline(transaction=True) as pipe:
                pipe.incr(key)
                pipe.expire(key, REDIS_KEY_TTL_S)
                count, _ = await pipe.execute()
            if int(count) <= limit:
                return True
            await self.client.decr(key)
            return False
        except (redis.exceptions.RedisError, OSError) as exc:
            log.warning("rate_limit_unavailable", backend="redis", error=type(exc).__name__)
            return True

    async def aclose(self) -> None:
        await self.client.aclose()
