"""The bounded wait: it returns as soon as the condition holds, sync or async, and fails
naming what it waited for once its limit has passed, instead of hanging the run."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from tests.support.waits import until, until_sync


async def test_until_returns_once_the_condition_holds() -> None:
    seen: list[int] = []
    asyncio.get_running_loop().call_later(0.05, seen.append, 1)
    await until(lambda: bool(seen), what="the callback")
    assert seen == [1]


async def test_until_awaits_an_async_condition() -> None:
    polls: list[int] = []

    async def third_poll() -> bool:
        polls.append(1)
        return len(polls) >= 3

    await until(third_poll, what="the third poll", poll_s=0)
    assert len(polls) == 3


async def test_until_fails_after_its_limit_naming_what_it_waited_for() -> None:
    started = time.monotonic()
    with pytest.raises(AssertionError, match=r"waited 0\.1 s for the door to open"):
        await until(lambda: False, what="the door to open", within_s=0.1)
    assert time.monotonic() - started >= 0.1


def test_until_sync_waits_for_another_thread_and_fails_after_its_limit() -> None:
    done = threading.Event()
    threading.Timer(0.05, done.set).start()
    until_sync(done.is_set, what="the timer")
    with pytest.raises(AssertionError, match=r"waited 0\.05 s for nothing"):
        until_sync(lambda: False, what="nothing", within_s=0.05)
