"""A turn's log: readers see every event once, in order, from any position; waiting readers
wake on each append and on the close; the log stays bounded."""

from __future__ import annotations

import asyncio

import pytest

from app.answer.events import Delta
from app.turn.native.event_log import LogTrimmed, TurnLog


def deltas(log: TurnLog, start: int) -> list[int]:
    return [e.seq for e in log.read(start) if isinstance(e, Delta)]


async def test_readers_from_any_position_get_the_rest_in_order() -> None:
    log = TurnLog()
    for seq in range(1, 6):
        log.append(Delta(f"d{seq}", seq))
    assert (log.first, log.end) == (0, 5)
    assert deltas(log, 0) == [1, 2, 3, 4, 5]
    assert deltas(log, 3) == [4, 5]
    assert deltas(log, 5) == []


async def test_a_waiting_reader_wakes_on_append_and_on_close() -> None:
    log = TurnLog()
    waiter = asyncio.create_task(log.wait(0))
    await asyncio.sleep(0)
    assert not waiter.done()
    log.append(Delta("a", 0))
    await asyncio.wait_for(waiter, 1)
    closed = asyncio.create_task(log.wait(1))
    await asyncio.sleep(0)
    log.close()
    await asyncio.wait_for(closed, 1)
    assert log.closed and log.end == 1


async def test_past_its_bound_the_oldest_events_go_and_a_reader_behind_them_is_told() -> None:
    log = TurnLog(max_events=100)
    for seq in range(250):
        log.append(Delta("x", seq))
    assert (log.first, log.end) == (150, 250)
    assert deltas(log, 240) == list(range(240, 250))
    with pytest.raises(LogTrimmed):
        log.read(149)
