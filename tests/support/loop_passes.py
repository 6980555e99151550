"""The event loop's passes, counted: whether a block let another task run, and whether a
write waits for another process's lock on its connection's thread while the loop runs on."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any


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


async def behind_another_process_writer(
    database: Path, ours: Callable[[], Coroutine[Any, Any, None]], trips: list[str],
    passes: LoopPasses,
) -> None:
    """Another process holds the write lock of `database`, having inserted 'from the other
    process' into its table t; `ours` runs until it waits on the thread for that lock
    (until_it_waits_on_the_thread), then the other process commits and `ours` ends."""
    other = sqlite3.connect(database, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        other.execute("INSERT INTO t (name) VALUES ('from the other process')")
        task = asyncio.create_task(ours())
        await until_it_waits_on_the_thread(task, trips, passes)
        other.execute("COMMIT")
        await task
    finally:
        other.close()
