"""The event loop's passes, counted: whether a block let another task run."""

from __future__ import annotations

import asyncio


class LoopPasses:
    """Counts the passes of the event loop while it runs: a task that yields at each."""

    def __init__(self) -> None:
        self.count = 0

    async def run(self) -> None:
        while True:
            self.count += 1
            await asyncio.sleep(0)


async def until_it_waits_on_the_thread(task: asyncio.Task[None], trips: list[str],
                                       passes: LoopPasses) -> None:
    """Until `task`'s BEGIN IMMEDIATE waits on its connection's thread for another process's
    lock (`trips`: what went to the thread), and the loop runs on meanwhile."""
    for _ in range(10_000):
        if trips:
            break
        await asyncio.sleep(0)
    assert trips == ["_run"] and not task.done()
    waiting = passes.count
    await asyncio.sleep(0)
    assert passes.count > waiting
