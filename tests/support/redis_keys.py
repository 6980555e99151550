"""The test Redis (CHATGATE_TEST_REDIS_URL, else 127.0.0.1:6379 database 15): each test gets
a key prefix of its own, its keys deleted afterwards, never a FLUSHALL of a shared server.

Without a Redis server the Redis tests skip, loudly (tests/support/skips.py counts them),
unless CHATGATE_REQUIRE_REDIS=1 (.ci/run sets it), where they fail instead."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from typing import NoReturn

import pytest
import redis.asyncio as aioredis

REDIS_URL = os.environ.get("CHATGATE_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")


def redis_missing(error: BaseException) -> NoReturn:
    """Skip the Redis test that found no server, or fail it with CHATGATE_REQUIRE_REDIS=1."""
    message = f"no Redis at {REDIS_URL} ({type(error).__name__})"
    if os.environ.get("CHATGATE_REQUIRE_REDIS") == "1":
        pytest.fail(f"{message} and CHATGATE_REQUIRE_REDIS=1", pytrace=False)
    pytest.skip(f"{message}: Redis test skipped")


@pytest.fixture
async def redis_prefix() -> AsyncIterator[str]:
    """A key prefix of this test's own on the test Redis, its keys deleted afterwards; the
    test is skipped (loudly) or failed (CHATGATE_REQUIRE_REDIS=1) without a Redis server."""
    client = aioredis.Redis.from_url(REDIS_URL, socket_connect_timeout=1.0)
    try:
        await client.ping()
    except (OSError, aioredis.RedisError) as exc:
        await client.aclose()
        redis_missing(exc)
    prefix = f"cg_test:{uuid.uuid4().hex[:12]}"
    yield prefix
    keys = [key async for key in client.scan_iter(f"{prefix}:*")]
    if keys:
        await client.delete(*keys)
    await client.aclose()
