"""What a stream trace costs the finishing transaction: the median time of a transaction
that writes one trace of N chunks, against the same transaction without it.

    python scripts/bench_trace.py [--chunks 900] [--runs 30] [--database-url URL]

Default database: a fresh SQLite file in a temporary directory (migrated to head). With
--database-url, use an EMPTY migrated database you own: threads are written to it.
"""

from __future__ import annotations

import asyncio
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Annotated

import typer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.store.db import Database
from app.store.migrations import upgrade_to_head
from app.threads import repository as threads
from app.turn.rows import Opened, OpeningRequest, traces, turn_rows

cli = typer.Typer(add_completion=False)
LINE = "Line 01 of the long demo answer: the quick brown fox jumps over the lazy dog.\n"


def chunks_of(count: int) -> list[str]:
    text = LINE * (count * 4 // len(LINE) + 1)
    return [text[i * 4:(i + 1) * 4] for i in range(count)]


async def run(url: str, count: int, runs: int) -> tuple[float, float]:
    db = Database(url)
    chunks = chunks_of(count)
    events = [{"type": "finish", "status": "complete", "content": "".join(chunks)}]
    with_trace: list[float] = []
    without: list[float] = []
    try:
        for _ in range(runs):
            async with db.transaction() as s:
                thread = await threads.create_thread(s, "bench")
            opened = await turn_rows(db).open(OpeningRequest("bench", thread.id, None))
            assert isinstance(opened, Opened), "the thread did not open"
            message = opened.assistant
            for timings, trace in ((without, False), (with_trace, True)):
                begin = time.perf_counter()
                async with db.transaction() as s:
                    await threads.touch_thread(s, thread.id)
                    if trace:
                        await traces.save_trace(
                            s, message_id=message.id, thread_id=thread.id, user_id="bench",
                            model="demo-1", status="complete", chunks=chunks, events=events)
                timings.append((time.perf_counter() - begin) * 1000)
    finally:
        await db.dispose()
    return statistics.median(without), statistics.median(with_trace)


@cli.command()
def main(
    chunks: Annotated[int, typer.Option(min=1)] = 900,
    runs: Annotated[int, typer.Option(min=1)] = 30,
    database_url: Annotated[str | None, typer.Option()] = None,
) -> None:
    url, scratch = database_url, None
    if url is None:
        scratch = tempfile.mkdtemp(prefix="cg_bench_trace_")
        url = f"sqlite+aiosqlite:///{scratch}/bench.db"
        asyncio.run(upgrade_to_head(url))
    try:
        plain, traced = asyncio.run(run(url, chunks, runs))
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    backend = url.split(":", 1)[0]
    print(f"{backend}: {chunks} chunks, {runs} runs; median transaction "
          f"without trace {plain:.2f} ms, with trace {traced:.2f} ms "
          f"(+{traced - plain:.2f} ms)")


if __name__ == "__main__":
    cli()
