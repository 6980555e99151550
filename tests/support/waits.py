"""Waiting on a condition, never on the clock alone, and never without a limit.

A fixed sleep that stands in for "the other task got there by now" passes on an idle machine
and fails on a loaded one; a loop with no limit hangs the run. `until` polls the condition
the test means and fails with what it waited for once `within_s` has passed. The limit is
generous on purpose: it is there to end a test that would hang, not to time anything; an
idle machine meets the condition in milliseconds.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable

WITHIN_S = 30.0
"""The default limit: far above what a loaded CI machine needs for a few steps of a turn."""


async def until(condition: Callable[[], bool | Awaitable[bool]], *, what: str,
                within_s: float = WITHIN_S, poll_s: float = 0.01) -> None:
    """Return once `condition()` (sync or async) is true; fail after `within_s`."""
    deadline = time.monotonic() + within_s
    while True:
        held = condition()
        if inspect.isawaitable(held):
            held = await held
        if held:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {within_s} s for {what}")
        await asyncio.sleep(poll_s)


def until_sync(condition: Callable[[], bool], *, what: str, within_s: float = WITHIN_S,
               poll_s: float = 0.01) -> None:
    """`until` for a test outside the event loop."""
    deadline = time.monotonic() + within_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {within_s} s for {what}")
        time.sleep(poll_s)
