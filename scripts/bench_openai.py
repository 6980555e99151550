"""Benchmark of the OpenAI-compatible endpoint against the native API, same gateway, same run.

    .venv/bin/python scripts/bench_openai.py [--turns 60] [--tokens 100]
        [--concurrency 1,10] [--max-seconds 300]

Starts the bench upstream (scripts/bench_upstream.py: `--tokens` one-token chunks an answer,
back to back: this script's figures were taken that way, unlike bench_gateway's paced ones)
and one gateway side by side (uvicorn, auth off, no side calls, a scratch SQLite file), then
for each concurrency runs the same number of streamed turns three ways, interleaved: straight
to the upstream, through the native `POST /api/threads/{id}/messages`, and through
`POST /v1/chat/completions` (no thread: usage recorded only). It prints the time to the first
content delta (p50, p99) of each and the gateway's CPU per turn for each of its two surfaces.
Every loop is bounded in count and time.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

import httpx
import typer
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.store.migrations import upgrade_to_head  # noqa: E402
from scripts.bench_gateway import (  # noqa: E402
    Batch,
    Bench,
    cpu_seconds,
    direct_turn,
    gateway_env,
    gateway_turn,
    once_up,
    pct,
    run_batch,
    running,
    upstream_argv,
)
from scripts.bench_upstream import free_port  # noqa: E402

app = typer.Typer(add_completion=False)
console = Console()


async def measure(bench: Bench, turns: int, levels: list[int]) -> None:
    openai_base = f"{bench.gateway}/v1"
    table = Table(title="time to the first content delta (ms); CPU per turn of the process "
                        "serving it")
    for column in ("concurrency", "surface", "p50", "p99", "CPU ms/turn", "errors"):
        table.add_column(column, justify="right")
    async with bench.client:
        for concurrency in levels:
            rows: dict[str, tuple[Batch, float]] = {}
            for _ in range(2):  # halves interleaved, so drift hits every surface alike
                half = max(concurrency, turns // 2)
                for name, turn, targets, pid in (
                    ("upstream", direct_turn, [bench.upstream] * half, bench.upstream_pid),
                    ("native", gateway_turn, await bench.threads(half), bench.gateway_pid),
                    ("/v1", direct_turn, [openai_base] * half, bench.gateway_pid),
                ):
                    before = cpu_seconds(pid)
                    batch = await run_batch(turn, bench.client, targets, concurrency,
                                            bench.deadline)
                    spent = cpu_seconds(pid) - before
                    total, cpu = rows.get(name, (Batch(), 0.0))
                    total.firsts += batch.firsts
                    total.errors += batch.errors
                    rows[name] = (total, cpu + spent)
            for name, (batch, cpu) in rows.items():
                per_turn = cpu * 1000 / max(1, len(batch.firsts))
                table.add_row(str(concurrency), name, f"{pct(batch.firsts, .5) * 1000:.1f}",
                              f"{pct(batch.firsts, .99) * 1000:.1f}", f"{per_turn:.1f}",
                              str(batch.errors))
    console.print(table)


@app.command()
def main(
    turns: int = typer.Option(60, min=2, max=5000),
    tokens: int = typer.Option(100, min=1, max=10000),
    concurrency: str = typer.Option("1,10"),
    max_seconds: float = typer.Option(300.0, min=5.0, max=3600.0),
) -> None:
    levels = [int(c) for c in concurrency.split(",") if c.strip()]
    deadline = time.monotonic() + max_seconds
    with tempfile.TemporaryDirectory(prefix="bench_openai_") as scratch:
        url = f"sqlite+aiosqlite:///{scratch}/bench.db"
        asyncio.run(upgrade_to_head(url))
        up_port, gw_port = free_port(), free_port()
        upstream = f"http://127.0.0.1:{up_port}/v1"
        gateway = f"http://127.0.0.1:{gw_port}"
        gw_argv = [sys.executable, "-m", "uvicorn", "app.gateway.main:create_app", "--factory",
                   "--host", "127.0.0.1", "--port", str(gw_port), "--log-level", "warning",
                   "--no-access-log"]
        env = {**gateway_env(upstream, url), "CHATGATE_MODELS": "bench-1"}
        with (running(upstream_argv(up_port, tokens, 0), dict(os.environ)) as up_process,
              running(gw_argv, env) as gw_process):
            up = once_up(up_process, f"http://127.0.0.1:{up_port}/healthz")
            gw = once_up(gw_process, f"{gateway}/healthz")
            console.print(f"{tokens} tokens a turn, {turns} turns a surface and concurrency",
                          highlight=False)
            limits = httpx.Limits(max_connections=2000, max_keepalive_connections=2000)
            client = httpx.AsyncClient(timeout=120.0, limits=limits)
            asyncio.run(measure(Bench(upstream, gateway, up, gw, deadline, client), turns,
                                levels))


if __name__ == "__main__":
    app()
