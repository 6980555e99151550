"""Redis going away and coming back, through a TCP proxy the test owns (the shared Redis is
never touched): while it is down, the process says so once a minute with a count of what
failed, not once a second; once it is back, the next turn is mirrored again, so a client
resumes it on another process."""

from __future__ import annotations

import asyncio
import datetime as dt
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import structlog

from app.answer.events import Delta, Ended, Started, TurnEvent
from app.turn.native.event_log import TurnLog
from app.turn.native.share import SharedTurns
from tests.support.gateway import FakeClock
from tests.support.redis_keys import REDIS_URL
from tests.support.tcp_proxy import TcpProxy, running_proxy

THREAD, USER_MESSAGE = uuid.uuid4(), uuid.uuid4()
#: Bounds of the polling loops below (a count of short waits, not a deadline).
POLLS, POLL_S = 400, 0.01


@pytest.fixture
def proxy() -> Iterator[TcpProxy]:
    host_port = REDIS_URL.split("//", 1)[1].split("/", 1)[0]
    host, port = host_port.rsplit(":", 1)
    with running_proxy(host, int(port)) as running:
        yield running


def proxied_url(proxy: TcpProxy) -> str:
    database = REDIS_URL.rsplit("/", 1)[1]
    return f"redis://127.0.0.1:{proxy.port}/{database}"


@pytest.fixture
async def direct(redis_prefix: str) -> AsyncIterator[SharedTurns]:
    """Another process's view of the shared turns, straight to Redis."""
    turns = SharedTurns(REDIS_URL, prefix=redis_prefix, keep_s=60, max_events=1000,
                        follow_block_ms=50)
    yield turns
    await turns.aclose()


def turn_log(message_id: uuid.UUID, deltas: int) -> TurnLog:
    log = TurnLog()
    log.append(Started(THREAD, USER_MESSAGE, message_id))
    for seq in range(1, deltas + 1):
        log.append(Delta(f"d{seq}", seq))
    return log


def end(log: TurnLog, message_id: uuid.UUID) -> list[TurnEvent]:
    log.append(Ended(message_id, "complete"))
    log.close()
    return log.read(0)


async def still_streaming() -> bool:
    return True


async def followed(turns: SharedTurns, message_id: uuid.UUID) -> list[TurnEvent]:
    return [e async for e in turns.follow(message_id, 0, still_streaming)]


def share_lines(logs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [line for line in logs if line["event"].startswith("turn_share_")]


async def until(condition: Any) -> None:
    for _ in range(POLLS):
        if condition():
            return
        await asyncio.sleep(POLL_S)
    raise AssertionError("the condition never held")


async def test_redis_down_is_one_warning_a_minute_with_a_count(
    proxy: TcpProxy, redis_prefix: str
) -> None:
    clock = FakeClock(dt.datetime(2026, 11, 28, 9, 0, tzinfo=dt.UTC))
    turns = SharedTurns(proxied_url(proxy), prefix=redis_prefix, keep_s=60,
                        max_events=1000, clock=clock, retry_s=0.01)
    proxy.cut()
    with structlog.testing.capture_logs() as logs:
        listener = asyncio.create_task(turns.listen_for_stops(lambda *_: None))
        try:
            await until(lambda: turns.outage.failures >= 20)
            first_minute = share_lines(logs)
            clock.now += dt.timedelta(seconds=61)
            await until(lambda: len(share_lines(logs)) > 1)
        finally:
            listener.cancel()
            await asyncio.gather(listener, return_exceptions=True)
            await turns.aclose()
    assert [line["event"] for line in first_minute] == ["turn_share_failed"]
    assert first_minute[0]["log_level"] == "warning"
    second = share_lines(logs)[1]
    assert second["event"] == "turn_share_failed"
    assert second["failures"] >= 20  # every failure of the minute, counted, not logged
    assert second["since_s"] == 61


async def test_the_first_turn_after_redis_returns_is_mirrored(
    proxy: TcpProxy, redis_prefix: str, direct: SharedTurns
) -> None:
    """No command ran while Redis was away: the connection left in the pool is dead, and
    the first write after the return fails on it."""
    turns = SharedTurns(proxied_url(proxy), prefix=redis_prefix, keep_s=60,
                        max_events=1000)
    try:
        before = uuid.uuid4()  # mirrored while Redis is up: the pool holds a connection
        log = turn_log(before, 2)
        mirror = asyncio.create_task(turns.mirror(before, log))
        events = end(log, before)
        assert await asyncio.wait_for(followed(direct, before), 5) == events
        await asyncio.wait_for(mirror, 5)
        proxy.cut()
        proxy.restore()
        after = uuid.uuid4()
        log = turn_log(after, 3)
        mirror = asyncio.create_task(turns.mirror(after, log))
        for seq in range(4, 7):
            log.append(Delta(f"d{seq}", seq))
            await asyncio.sleep(0.01)
        reader = asyncio.create_task(followed(direct, after))
        events = end(log, after)
        assert await asyncio.wait_for(reader, 5) == events
        await asyncio.wait_for(mirror, 5)
    finally:
        await turns.aclose()
