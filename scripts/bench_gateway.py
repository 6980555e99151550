"""Benchmark of the whole gateway against the model server it fronts, on loopback.

    .venv/bin/python scripts/bench_gateway.py [--turns 60] [--tokens 100]
        [--concurrency 1,10,100,500] [--open-streams 200] [--database-url URL]
        [--compare URL [--compare-pid PID]] [--max-seconds 600]

Starts a small OpenAI-compatible upstream (this script, `--serve-upstream`: `--tokens`
one-token chunks per answer) and the gateway (uvicorn, auth off, no title or summary calls,
a scratch SQLite file unless --database-url), then measures, interleaving the direct upstream
and the gateway in the same run:

- CPU per turn: process CPU seconds (/proc) over `--turns` turns at 10 concurrent, for the
  upstream alone and for the gateway;
- time to the first delta, p50 and p99, direct and through the gateway, at each concurrency,
  and what the gateway adds;
- RSS per open stream: the gateway's resident memory with `--open-streams` slow streams open,
  minus its idle RSS, divided by the streams.

`--compare URL` measures another OpenAI-compatible proxy fronting the same upstream the same
way (`URL` is its base, e.g. http://127.0.0.1:4000/v1; `--compare-pid` to read its CPU).
Every loop is bounded in count and in time; nothing listens beyond 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import typer
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.store.migrations import upgrade_to_head  # noqa: E402
from scripts.bench_upstream import free_port, serve_upstream  # noqa: E402

app = typer.Typer(add_completion=False)
console = Console()
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
START_TIMEOUT_S = 30.0


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def wait_for(url: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{url}: the process exited with {process.returncode}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=1.0).status_code == 200:
                return
        time.sleep(0.05)
    raise RuntimeError(f"{url} did not come up in {START_TIMEOUT_S} s")


@contextlib.contextmanager
def started(argv: list[str], env: dict[str, str], health: str) -> Iterator[int]:
    """A loopback server process, up (its health URL answers); yields its pid."""
    process = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    try:
        wait_for(health, process)
        yield process.pid
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()


def gateway_env(upstream: str, database_url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHATGATE_")}
    env.update({
        "CHATGATE_DATABASE_URL": database_url, "CHATGATE_UPSTREAM_BASE_URL": upstream,
        "CHATGATE_AUTH_MODE": "off", "CHATGATE_TITLE_CALLS": "false",
        "CHATGATE_SUMMARY_CALLS": "false", "CHATGATE_LOG_LEVEL": "WARNING",
        "CHATGATE_UPSTREAM_MAX_RETRIES": "0", "CHATGATE_MAX_STREAMS_PER_USER": "100000",
        "CHATGATE_RATE_LIMIT_PER_MINUTE": "0", "CHATGATE_UPSTREAM_POOL_SIZE": "2000",
        "PYTHONUNBUFFERED": "1",
    })
    return env


# -- one turn, direct or through the gateway ------------------------------------------------

Turn = Callable[[httpx.AsyncClient, str], Awaitable[float]]


async def direct_turn(client: httpx.AsyncClient, base: str, text: str = "hello") -> float:
    """Seconds to the first content chunk of a streamed chat completion; drains the rest."""
    body = {"model": "bench-1", "stream": True, "messages": [{"role": "user", "content": text}]}
    began = time.perf_counter()
    first: float | None = None
    async with client.stream("POST", f"{base}/chat/completions", json=body) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if first is None and line.startswith("data: {") and '"content":"' in line:
                first = time.perf_counter() - began
    if first is None:
        raise RuntimeError("no content chunk")
    return first


async def gateway_turn(client: httpx.AsyncClient, thread_url: str, text: str = "hello"
                       ) -> float:
    """Seconds to the first `delta` event of a native turn; drains the rest."""
    began = time.perf_counter()
    first: float | None = None
    ended = False
    async with client.stream("POST", thread_url, json={"content": text}) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if first is None and line == "event: delta":
                first = time.perf_counter() - began
            ended = ended or line == "event: message_end"
    if first is None or not ended:
        raise RuntimeError("the turn did not stream to its end")
    return first


@dataclass
class Batch:
    firsts: list[float] = field(default_factory=list)
    errors: int = 0


async def run_batch(turn: Turn, client: httpx.AsyncClient, targets: list[str],
                    concurrency: int, deadline: float) -> Batch:
    """Every target once, `concurrency` at a time, until the deadline."""
    batch = Batch()
    queue = list(targets)
    gate = asyncio.Semaphore(concurrency)

    async def one(target: str) -> None:
        async with gate:
            if time.monotonic() > deadline:
                return
            try:
                batch.firsts.append(await turn(client, target))
            except (httpx.HTTPError, RuntimeError):
                batch.errors += 1

    await asyncio.gather(*(one(t) for t in queue))
    return batch


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


# -- the measurements ------------------------------------------------------------------------

@dataclass
class Bench:
    upstream: str
    gateway: str
    upstream_pid: int
    gateway_pid: int
    deadline: float
    client: httpx.AsyncClient

    async def threads(self, n: int) -> list[str]:
        """n fresh threads' message URLs (one turn each, so no history grows)."""
        urls = []
        for _ in range(n):
            for attempt in range(3):  # a keep-alive connection the server just closed
                try:
                    created = await self.client.post(f"{self.gateway}/api/threads", json={})
                    break
                except httpx.TransportError:
                    if attempt == 2:
                        raise
            created.raise_for_status()
            urls.append(f"{self.gateway}/api/threads/{created.json()['id']}/messages")
        return urls

    async def cpu_per_turn(self, turns: int) -> tuple[float, float]:
        """(upstream ms, gateway ms) per turn, 10 concurrent."""
        targets = await self.threads(turns)
        before = cpu_seconds(self.upstream_pid)
        await run_batch(direct_turn, self.client, [self.upstream] * turns, 10, self.deadline)
        upstream_ms = (cpu_seconds(self.upstream_pid) - before) * 1000 / turns
        before = cpu_seconds(self.gateway_pid)
        await run_batch(gateway_turn, self.client, targets, 10, self.deadline)
        gateway_ms = (cpu_seconds(self.gateway_pid) - before) * 1000 / turns
        return upstream_ms, gateway_ms

    async def first_delta(self, concurrency: int, turns: int) -> tuple[Batch, Batch]:
        """Direct and gateway batches interleaved in halves, so drift hits both alike."""
        direct, through = Batch(), Batch()
        for _ in range(2):
            half = max(concurrency, turns // 2)
            d = await run_batch(direct_turn, self.client, [self.upstream] * half,
                                concurrency, self.deadline)
            g = await run_batch(gateway_turn, self.client, await self.threads(half),
                                concurrency, self.deadline)
            direct.firsts += d.firsts
            direct.errors += d.errors
            through.firsts += g.firsts
            through.errors += g.errors
        return direct, through

    async def rss_per_stream(self, streams: int) -> tuple[float, int]:
        """(KB per open stream, streams that were open when measured)."""
        targets = await self.threads(streams)
        idle = rss_kb(self.gateway_pid)
        opened = asyncio.Event()
        started_count = 0

        async def hold(url: str) -> None:
            nonlocal started_count
            with contextlib.suppress(httpx.HTTPError):
                async with self.client.stream("POST", url, json={"content": "[slow]"}) as r:
                    async for line in r.aiter_lines():
                        if line == "event: delta":
                            started_count += 1
                            if started_count == streams:
                                opened.set()
                            await asyncio.sleep(3600)  # hold it open; cancelled below

        tasks = [asyncio.create_task(hold(url)) for url in targets]
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(opened.wait(), max(1.0, self.deadline - time.monotonic()))
        busy = rss_kb(self.gateway_pid)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return (busy - idle) / max(1, started_count), started_count


def report_cpu(upstream_ms: float, gateway_ms: float, tokens: int) -> None:
    # /proc counts CPU in clock ticks (10 ms): a short run may see none for the upstream.
    ratio = f"{gateway_ms / upstream_ms:.1f}x" if upstream_ms > 0 else "n/a (too short)"
    console.print(f"CPU per {tokens}-token turn (10 concurrent): upstream {upstream_ms:.1f} ms, "
                  f"gateway {gateway_ms:.1f} ms, ratio {ratio}", highlight=False)


def report_first_delta(levels: list[tuple[int, Batch, Batch]]) -> None:
    table = Table(title="time to the first delta (ms)")
    for column in ("concurrency", "direct p50", "direct p99", "gateway p50", "gateway p99",
                   "added p50", "added p99", "errors"):
        table.add_column(column, justify="right")
    for concurrency, direct, through in levels:
        d50, d99 = pct(direct.firsts, 0.5) * 1000, pct(direct.firsts, 0.99) * 1000
        g50, g99 = pct(through.firsts, 0.5) * 1000, pct(through.firsts, 0.99) * 1000
        table.add_row(str(concurrency), f"{d50:.1f}", f"{d99:.1f}", f"{g50:.1f}", f"{g99:.1f}",
                      f"{g50 - d50:.1f}", f"{g99 - d99:.1f}",
                      str(direct.errors + through.errors))
    console.print(table)


async def measure(bench: Bench, turns: int, levels: list[int], open_streams: int,
                  tokens: int) -> None:
    """Each figure printed as soon as it is measured."""
    async with bench.client:
        report_cpu(*await bench.cpu_per_turn(turns), tokens)
        results = []
        for concurrency in levels:
            direct, through = await bench.first_delta(concurrency, turns)
            results.append((concurrency, direct, through))
        report_first_delta(results)
        per_stream, opened = await bench.rss_per_stream(open_streams)
    console.print(f"RSS per open stream: {per_stream:.0f} KB ({opened} slow streams open)",
                  highlight=False)


async def compare(url: str, pid: int | None, upstream: str, turns: int, levels: list[int],
                  deadline: float) -> None:
    """Another proxy fronting the same upstream: added first-delta time and its CPU."""
    limits = httpx.Limits(max_connections=2000, max_keepalive_connections=2000)
    async with httpx.AsyncClient(timeout=60.0, limits=limits) as client:
        table = Table(title=f"compare {url}: time to the first delta (ms)")
        for column in ("concurrency", "direct p50", "proxy p50", "proxy p99", "errors"):
            table.add_column(column, justify="right")
        before = cpu_seconds(pid) if pid else 0.0
        for concurrency in levels:
            d = await run_batch(direct_turn, client, [upstream] * turns, concurrency, deadline)
            p = await run_batch(direct_turn, client, [url] * turns, concurrency, deadline)
            table.add_row(str(concurrency), f"{pct(d.firsts, .5) * 1000:.1f}",
                          f"{pct(p.firsts, .5) * 1000:.1f}", f"{pct(p.firsts, .99) * 1000:.1f}",
                          str(p.errors))
        console.print(table)
        if pid:
            total = turns * len(levels)
            console.print(f"compare CPU per turn: "
                          f"{(cpu_seconds(pid) - before) * 1000 / total:.1f} ms", highlight=False)


@app.command()
def main(
    turns: int = typer.Option(60, min=2, max=5000),
    tokens: int = typer.Option(100, min=1, max=10000),
    concurrency: str = typer.Option("1,10,100,500"),
    open_streams: int = typer.Option(200, min=1, max=5000),
    database_url: str | None = typer.Option(None),
    compare_url: str | None = typer.Option(None, "--compare"),
    compare_pid: int | None = typer.Option(None),
    max_seconds: float = typer.Option(600.0, min=5.0, max=3600.0),
    serve_upstream_port: int | None = typer.Option(None, "--serve-upstream", hidden=True),
) -> None:
    if serve_upstream_port is not None:
        asyncio.run(serve_upstream(serve_upstream_port, tokens))
        return
    levels = [int(c) for c in concurrency.split(",") if c.strip()]
    deadline = time.monotonic() + max_seconds
    with tempfile.TemporaryDirectory(prefix="bench_gateway_") as scratch:
        url = database_url or f"sqlite+aiosqlite:///{scratch}/bench.db"
        asyncio.run(upgrade_to_head(url))
        up_port, gw_port = free_port(), free_port()
        upstream = f"http://127.0.0.1:{up_port}/v1"
        gateway = f"http://127.0.0.1:{gw_port}"
        up_argv = [sys.executable, str(Path(__file__)), "--serve-upstream", str(up_port),
                   "--tokens", str(tokens)]
        gw_argv = [sys.executable, "-m", "uvicorn", "app.main:create_app", "--factory",
                   "--host", "127.0.0.1", "--port", str(gw_port), "--log-level", "warning",
                   "--no-access-log"]
        with (started(up_argv, dict(os.environ), f"http://127.0.0.1:{up_port}/healthz") as up,
              started(gw_argv, gateway_env(upstream, url), f"{gateway}/healthz") as gw):
            console.print(f"{tokens} tokens a turn, {turns} turns a measurement, "
                          f"database {url.split(':', 1)[0]}", highlight=False)
            limits = httpx.Limits(max_connections=6000, max_keepalive_connections=6000)
            client = httpx.AsyncClient(timeout=120.0, limits=limits)
            bench = Bench(upstream, gateway, up, gw, deadline, client)
            asyncio.run(measure(bench, turns, levels, open_streams, tokens))
            if compare_url:
                asyncio.run(compare(compare_url, compare_pid, upstream, turns, levels,
                                    deadline))


if __name__ == "__main__":
    app()
