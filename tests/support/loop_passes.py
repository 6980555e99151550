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
