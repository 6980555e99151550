"""How long the repair takes on a seeded database: median seconds of `scan`, `fix --apply` and
`rollback` over several runs (each apply is rolled back before the next, so every run repairs
the same rows). The seed is the one the repair tests use (tests/repair/seed.py): every
corruption kind mixed with clean rows.

    python scripts/bench_repair.py [--messages 10000] [--runs 5] [--database-url URL]

Default database: a fresh SQLite file in a temporary directory (migrated to head). With
--database-url, use an EMPTY migrated database you own: the seed is written to it.
"""

from __future__ import annotations

import asyncio
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Annotated

import typer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.repair import service as repair_runs
from app.store.db import Database
from app.store.migrations import upgrade_to_head
from tests.repair.seed import seed

cli = typer.Typer(add_completion=False)


async def measure(url: str, messages: int, runs: int) -> dict[str, float]:
    db = Database(url)
    timings: dict[str, list[float]] = {"scan": [], "apply": [], "rollback": []}
    try:
        seeded = await seed(db, messages)
        print(f"seeded {len(seeded.kinds)} messages, {len(seeded.corrupt_ids)} corrupt")
        for _ in range(runs):
            scan = await repair_runs.scan_messages(db)
            applied = await repair_runs.apply_repairs(db)
            if applied.run_id is None or applied.repaired != scan.corrupt:
                raise RuntimeError(f"apply repaired {applied.repaired} of {scan.corrupt} rows")
            restored = await repair_runs.rollback_run(db, applied.run_id)
            if restored.restored != applied.repaired:
                raise RuntimeError(f"rollback restored {restored.restored} rows")
            timings["scan"].append(scan.seconds)
            timings["apply"].append(applied.seconds)
            timings["rollback"].append(restored.seconds)
        print(f"per run: {scan.scanned} candidates scanned, {applied.repaired} rows repaired "
              "and restored")
    finally:
        await db.dispose()
    return {name: statistics.median(values) for name, values in timings.items()}


@cli.command()
def main(
    messages: Annotated[int, typer.Option(min=1)] = 10_000,
    runs: Annotated[int, typer.Option(min=1)] = 5,
    database_url: Annotated[str | None, typer.Option()] = None,
) -> None:
    url, scratch = database_url, None
    if url is None:
        scratch = tempfile.mkdtemp(prefix="cg_bench_repair_")
        url = f"sqlite+aiosqlite:///{scratch}/bench.db"
        asyncio.run(upgrade_to_head(url))
    try:
        medians = asyncio.run(measure(url, messages, runs))
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    backend = url.split(":", 1)[0]
    print(f"{backend}: {messages} messages, median of {runs} runs: scan {medians['scan']:.2f} s, "
          f"fix --apply {medians['apply']:.2f} s, rollback {medians['rollback']:.2f} s")


if __name__ == "__main__":
    cli()
