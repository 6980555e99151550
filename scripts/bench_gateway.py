"""Benchmark of the whole gateway against the model server it fronts, on loopback.

    .venv/bin/python scripts/bench_gateway.py [--turns 60] [--tokens 100] [--pace-ms 10]
        [--concurrency 1,10,100,500] [--open-streams 200] [--database-url URL]
        [--long-tokens 1000] [--history 100] [--cost-rounds 5] [--settle-turns 30]
        [--workers 2] [--users 1] [--sample-waits]
        [--redis-url URL]
        [--rates 60,120]
        [--baseline-root DIR] [--litellm]
        [--compare URL [--compare-pid PID] [--upstream-port PORT]] [--max-seconds 600]
        [--rss-settle-s 11] [--gateway-cores 0]

Starts a small OpenAI-compatible upstream (scripts/bench_upstream.py, a process of its own) and
the gateway (uvicorn, auth off, no title or summary calls, logs at the default level, a
scratch SQLite file unless --database-url), side by side. The upstream streams
as a model does: `--tokens` tokens an answer, each its own SSE event in its own write,
`--pace-ms` apart (10 ms by default; a turn then lasts tokens x pace, 1 s at the defaults), so
that the gateway reads, filters and writes one token at a time; `--pace-ms 0` writes an
answer's tokens back to back, many to a read (the burst the figures were first taken with).
It then measures, interleaving the direct upstream and the gateway in the same run:

- CPU per turn: process CPU seconds (/proc) over `--turns` turns at 10 concurrent, for the
  upstream alone and for the gateway (paced, the waits between tokens cost no CPU: the
  figure is the cost of the reads, filter steps and writes of a turn's tokens);
- time to the first delta, p50 and p99, direct and through the gateway, at each concurrency,
  and what the gateway adds (the gateway's first delta minus the direct one: the upstream
  sends the first token at once, so both are the time to it, and the pace only sets how much
  of the other streams' token traffic each turn's opening meets);
- the same at each fixed arrival rate of `--rates` (turns a second): a turn starts on time
  whether or not the ones before it are done. At a fixed concurrency, a gateway that gets
  faster somewhere is sent more turns a second, whose waits can raise its first-delta
  figures; at a fixed rate both builds of a comparison carry the same load;
- RSS per open stream: the gateway's resident memory with `--open-streams` slow streams open,
  minus its idle RSS, divided by the streams (before the loads, whose freed memory the
  streams would reuse unseen), each reading `--rss-settle-s` after the moment it measures
  (the gateway returns freed memory to the system every 10 s); `--open-streams 0` skips it;
- linear cost: CPU per turn of a `--long-tokens` answer against a `--tokens` one, and of a
  turn on a thread with `--history` prior messages against one on a fresh thread (0 skips
  either; paced, a long answer lasts long-tokens x pace), each the median of `--cost-rounds`
  rounds, the history's after `--settle-turns` uncounted turns a round;
- workers: turns per second of a second gateway with `--workers` uvicorn workers against the
  one-process gateway, interleaved, with the direct upstream's rate as the ceiling, the load
  generator's own CPU per turn (it shares the cores), and the cores' headroom: how many times
  one process's rate the cores could carry at the CPU per turn every process on the machine
  spent with one (1 / how busy one process kept them). Paced, `--workers-concurrency`
  streams of tokens x pace each bound the rate too: raise it, or measure this step with
  `--pace-ms 0`. Both gateways of this step are its own, with API keys on: `--users N`
  makes N users a key each and spreads the turns (and threads) over them round robin (1:
  one busy key, one rollup row and one stream-cap lock). For each gateway it prints every
  process's share of the turns (the answer row names the process that streamed it,
  `stream_process`, registered with its pid) and its CPU per turn. `--sample-waits` (on
  PostgreSQL) samples pg_stat_activity and the ungranted pg_locks of the bench's database
  while each gateway's turns run, and prints what its sessions waited on (e.g.
  `Lock:advisory`: the stream-cap lock; `Lock:transactionid` on the finish: a row another
  finish holds, the user's rollup; `Lock:object`: the database-wide lock a transaction that
  sends NOTIFY takes at commit). The bench migrates and writes the --database-url it is
  given: give it a scratch database.

Side by side, in the same run: the CPU-per-turn and first-delta steps measure, interleaved in
halves with the direct upstream and the gateway, every other side asked for, print each one's
table and then one table of all of them (CPU per turn, and the first delta each adds at each
concurrency):

- `--baseline-root DIR`: another tree of the project (for before/after figures, e.g.
  `git worktree add /tmp/base COMMIT`), its gateway run by the same venv's python from DIR
  (DIR first on its path, so `app` imports from there), on a database of its own migrated by
  DIR's code: a scratch SQLite file, or with a PostgreSQL --database-url a fresh database on
  that server, dropped at the end;
- `--litellm`: LiteLLM's proxy from the client tests' cached venv (scripts/test_clients.sh;
  scripts/bench_litellm.py adds its proxy's packages there once), on 127.0.0.1, its config in
  a scratch file with model `bench-1` on the bench upstream; its start command is printed;
- `--compare URL`: another OpenAI-compatible proxy fronting the same upstream (`URL` is its
  base, e.g. http://127.0.0.1:4000/v1; `--compare-pid` to read its CPU): start it first,
  pointed at http://127.0.0.1:PORT/v1 (model `bench-1`), and give `--upstream-port PORT`.

`--gateway-cores 0` (or `0,1`, ...) runs the gateway and its workers (and the baseline and
LiteLLM's proxy) on those cores only and the load generator and the upstream on the others,
so that the gateway's own figures are not the machine's (PostgreSQL's processes are not
pinned). The workers step then wants as many gateway cores as `--workers`: two workers on
one core measure that core.
Every loop is bounded in count and in time; nothing listens beyond 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import typer
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console
from rich.table import Table
from sqlalchemy import func, select, text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.answer.records import FinishedMessage  # noqa: E402
from app.api.auth import LOCAL_USER  # noqa: E402
from app.keys.repository import create_key  # noqa: E402
from app.process.heap import (  # noqa: E402
    TRIM_INTERVAL_S,
    freeze_startup_heap,
    space_out_collections,
)
from app.store.db import Database  # noqa: E402
from app.store.migrations import upgrade_to_head  # noqa: E402
from app.store.models import GatewayProcess, Message  # noqa: E402
from app.turn.rows import Opened, OpeningRequest, turn_rows  # noqa: E402
from app.upstream.transport import AiohttpTransport  # noqa: E402
from scripts import bench_litellm  # noqa: E402
from scripts.bench_upstream import free_port  # noqa: E402

app = typer.Typer(add_completion=False)
console = Console()
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
#: How long a server may take to answer: several start side by side (the gateways of the
#: workers step, three processes importing at once), on a machine that may be busy.
START_TIMEOUT_S = 60.0
#: The open-streams step stops waiting for more streams once none started for this long (or
#: all did), and measures the streams open then.
OPEN_STALL_S = 15.0
#: How long a step waits for the streams a former step left (the resume grace is 30 s).
DRAIN_WAIT_S = 90.0
#: Rounds of each linear-cost measurement (`--cost-rounds`): CPU per turn moves by a fifth
#: between runs of a few seconds on a shared machine, as much as the differences measured.
COST_ROUNDS = 5
#: Turns run after seeding a history, not counted (`--settle-turns`, see Bench.history_cost).
SETTLE_TURNS = 30
#: A clean refusal of an overloaded gateway: 503 with one of these codes and a Retry-After.
REFUSAL_CODES = ("gateway_busy", "database_unavailable")


class Failed(Exception):
    """A turn that did not stream to its end; `kind` says how (a status and code, or the
    client's exception), `refused` when it was a clean 503 with Retry-After."""

    def __init__(self, kind: str, refused: bool = False) -> None:
        super().__init__(kind)
        self.kind, self.refused = kind, refused


def error_event_code(data_line: str) -> str:
    """The `code` of an SSE `error` event's data line (the stream's failure)."""
    try:
        return str(json.loads(data_line.removeprefix("data:"))["code"])
    except (ValueError, KeyError, TypeError):
        return "unreadable"


async def check_status(response: httpx.Response) -> None:
    if response.status_code < 400:
        return
    await response.aread()
    code = ""
    with contextlib.suppress(ValueError, AttributeError, TypeError):
        body = response.json()
        code = body.get("code") or body.get("error", {}).get("code") or ""
    refused = (response.status_code == 503 and code in REFUSAL_CODES
               and "retry-after" in response.headers)
    raise Failed(f"{response.status_code} {code}".strip(), refused)


def raise_fd_limit() -> None:
    """The open-streams step holds thousands of sockets in this process (and the gateway,
    which inherits the limit, as many): the soft limit goes up to the hard one."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def wait_for(url: str, process: subprocess.Popen[bytes], timeout: float = START_TIMEOUT_S
             ) -> None:
    """Until `url` answers 200. One client polls: a new one a poll (httpx.get) builds its TLS
    context each time, about 25 ms of CPU, half a core at this pace taken from the process
    being waited for, which is importing on the same cores."""
    deadline = time.monotonic() + timeout
    with httpx.Client(timeout=1.0) as client:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"{url}: the process exited with {process.returncode}")
            with contextlib.suppress(httpx.HTTPError):
                if client.get(url).status_code == 200:
                    return
            time.sleep(0.05)
    raise RuntimeError(f"{url} did not come up in {timeout} s")


@contextlib.contextmanager
def running(argv: list[str], env: dict[str, str], cwd: Path = ROOT, log: Path | None = None
            ) -> Iterator[subprocess.Popen[bytes]]:
    """A process, started and not waited for (see once_up), stopped at the end: SIGTERM, then
    SIGKILL after 10 s. With `log`, its output goes there."""
    with contextlib.ExitStack() as files:
        out = files.enter_context(log.open("wb")) if log else subprocess.DEVNULL
        process = subprocess.Popen(argv, cwd=cwd, env=env, stdout=out, stderr=out)
    try:
        yield process
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()


def once_up(process: subprocess.Popen[bytes], health: str, timeout: float = START_TIMEOUT_S,
            log: Path | None = None) -> int:
    """A running server process's pid once its health URL answers; with `log`, the end of
    its output is in the error when it does not come up. Servers all started (running)
    before the first is waited for import side by side, on every core, not one after
    another."""
    try:
        wait_for(health, process, timeout)
    except RuntimeError as error:
        tail = log.read_text(errors="replace")[-3000:] if log else ""
        raise RuntimeError(f"{error}{chr(10) + tail if tail else ''}") from None
    return process.pid


@contextlib.contextmanager
def started(argv: list[str], env: dict[str, str], health: str, cwd: Path = ROOT,
            timeout: float = START_TIMEOUT_S, log: Path | None = None) -> Iterator[int]:
    """A loopback server process, up (its health URL answers); yields its pid. With `log`,
    its output goes there, and the end of it into the error when it does not come up."""
    with running(argv, env, cwd, log) as process:
        yield once_up(process, health, timeout, log)


@dataclass(frozen=True)
class Pinning:
    """`--gateway-cores`: the cores the gateway runs on, and the others, where the load
    generator and the upstream run. On a machine they share, the closed-loop figures and the
    workers' ratio measure the machine as much as the gateway; pinned, the gateway's own
    share is seen (PostgreSQL's processes stay where the system puts them: the server is not
    this script's)."""

    gateway: frozenset[int]
    others: frozenset[int]

    @classmethod
    def parse(cls, spec: str, available: set[int]) -> Pinning:
        try:
            cores = frozenset(int(core) for core in spec.split(",") if core.strip())
        except ValueError:
            raise typer.BadParameter(f"core numbers, e.g. 0 or 0,1: not {spec!r}") from None
        if not cores or not cores <= available:
            raise typer.BadParameter(f"this process may run on cores {sorted(available)}")
        if not available - cores:
            raise typer.BadParameter("leave a core to the load generator and the upstream")
        return cls(cores, frozenset(available - cores))

    def apply_here(self) -> None:
        """This process to the other cores, before it starts the upstream (which inherits
        them)."""
        os.sched_setaffinity(0, self.others)

    def starting(self, pid: int) -> None:
        """A gateway just started: it inherits this process's cores (the others' alone), and
        would import there, its workers too; on every core until it answers (apply_to). One
        that has already exited is left to once_up to report."""
        with contextlib.suppress(ProcessLookupError):
            os.sched_setaffinity(pid, self.gateway | self.others)

    def apply_to(self, pid: int) -> None:
        """Every thread of a started gateway and of its workers to the gateway's cores (the
        threads they start later inherit them)."""
        for process in (pid, *children_of(pid)):
            for thread in Path(f"/proc/{process}/task").iterdir():
                os.sched_setaffinity(int(thread.name), self.gateway)

    def describe(self) -> str:
        return (f"the gateway on cores {sorted(self.gateway)}, the load generator and the "
                f"upstream on {sorted(self.others)}")


def gateway_env(upstream: str, database_url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHATGATE_")}
    env.update({
        "CHATGATE_DATABASE_URL": database_url, "CHATGATE_UPSTREAM_BASE_URL": upstream,
        "CHATGATE_AUTH_MODE": "off", "CHATGATE_TITLE_CALLS": "false",
        "CHATGATE_SUMMARY_CALLS": "false", "CHATGATE_LOG_FORMAT": "json",
        "CHATGATE_UPSTREAM_MAX_RETRIES": "0", "CHATGATE_MAX_STREAMS_PER_USER": "100000",
        "CHATGATE_RATE_LIMIT_PER_MINUTE": "0", "CHATGATE_UPSTREAM_POOL_SIZE": "2000",
        "PYTHONUNBUFFERED": "1",
    })
    return env


# -- one turn, direct or through the gateway ------------------------------------------------

Turn = Callable[[httpx.AsyncClient, str], Awaitable[float]]


class Seen:
    """Whether a marker has gone by in a body read block by block (a block may cut it)."""

    def __init__(self, marker: bytes) -> None:
        self.marker, self.found = marker, False
        self._tail = b""

    def feed(self, block: bytes) -> bool:
        if not self.found:
            window = self._tail + block
            self.found = self.marker in window
            self._tail = window[-(len(self.marker) - 1):]
        return self.found


async def direct_turn(client: httpx.AsyncClient, base: str, text: str = "hello") -> float:
    """Seconds to the first content chunk of a streamed chat completion; drains the rest.
    The body is scanned raw, not split into lines: the load generator shares the machine's
    cores with what it measures, so its own cost per chunk is kept small."""
    body = {"model": "bench-1", "stream": True, "messages": [{"role": "user", "content": text}]}
    began = time.perf_counter()
    first: float | None = None
    # The bench upstream's tokens are `w<n> `: the role chunk's empty content, which a
    # proxy may send before the first token, is not the first delta.
    content = Seen(b'"content":"w')
    async with client.stream("POST", f"{base}/chat/completions", json=body) as response:
        await check_status(response)
        async for block in response.aiter_raw():
            if first is None and content.feed(block):
                first = time.perf_counter() - began
    if first is None:
        raise RuntimeError("no content chunk")
    return first


async def gateway_turn(client: httpx.AsyncClient, thread_url: str, text: str = "hello",
                       headers: dict[str, str] | None = None) -> float:
    """Seconds to the first `delta` event of a native turn; drains the rest."""
    began = time.perf_counter()
    first: float | None = None
    delta, end = Seen(b"event: delta\n"), Seen(b"event: message_end\n")
    async with client.stream("POST", thread_url, json={"content": text},
                             headers=headers) as response:
        await check_status(response)
        async for block in response.aiter_raw():
            if first is None and delta.feed(block):
                first = time.perf_counter() - began
            end.feed(block)
    if first is None or not end.found:
        raise RuntimeError("the turn did not stream to its end")
    return first


@dataclass
class Batch:
    firsts: list[float] = field(default_factory=list)
    errors: int = 0
    refused: int = 0
    #: How each failed turn failed (status and code, or exception), refusals included.
    kinds: Counter[str] = field(default_factory=Counter)

    def add(self, other: Batch) -> None:
        self.firsts += other.firsts
        self.errors += other.errors
        self.refused += other.refused
        self.kinds.update(other.kinds)


async def run_batch(turn: Turn, client: httpx.AsyncClient, targets: list[str],
                    concurrency: int, deadline: float) -> Batch:
    """Every target once, `concurrency` at a time, until the deadline."""
    batch = Batch()
    gate = asyncio.Semaphore(concurrency)

    async def one(target: str) -> None:
        async with gate:
            if time.monotonic() <= deadline:
                await batch_turn(batch, turn, client, target)

    await asyncio.gather(*(one(t) for t in targets))
    return batch


async def paced_batch(turn: Turn, client: httpx.AsyncClient, targets: list[str],
                      rate: float, deadline: float) -> Batch:
    """Every target once, one started every 1/rate s however many are still open (an open
    loop, bounded by the targets' count), until the deadline."""
    batch = Batch()
    began = time.monotonic()
    tasks = []
    for index, target in enumerate(targets):
        pause = began + index / rate - time.monotonic()
        if pause > 0:
            await asyncio.sleep(pause)
        if time.monotonic() > deadline:
            break
        tasks.append(asyncio.create_task(batch_turn(batch, turn, client, target)))
    await asyncio.gather(*tasks)
    return batch


async def batch_turn(batch: Batch, turn: Turn, client: httpx.AsyncClient, target: str) -> None:
    """One turn, its first delta or how it failed noted in `batch`."""
    try:
        batch.firsts.append(await turn(client, target))
    except Failed as failed:
        batch.kinds[failed.kind] += 1
        if failed.refused:
            batch.refused += 1
        else:
            batch.errors += 1
    except (httpx.HTTPError, RuntimeError) as error:
        batch.kinds[type(error).__name__] += 1
        batch.errors += 1


def active_streams(metrics: str) -> float:
    """The gateway's `chatgate_active_streams` from its /metrics text (0 when absent)."""
    return next((sample.value for family in text_string_to_metric_families(metrics)
                 for sample in family.samples if sample.name == "chatgate_active_streams"),
                0.0)


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def new_threads(client: httpx.AsyncClient, gateway: str, n: int,
                      headers: Sequence[dict[str, str]] = ({},)) -> list[str]:
    """n fresh threads' message URLs on a gateway (one turn each, so no history grows), the
    i-th created with the i-th of `headers` taken round robin (a user's key)."""
    urls = []
    for index in range(n):
        for attempt in range(3):  # a keep-alive connection the server just closed
            try:
                created = await client.post(f"{gateway}/api/threads", json={},
                                            headers=headers[index % len(headers)])
                break
            except httpx.TransportError:
                if attempt == 2:
                    raise
        created.raise_for_status()
        urls.append(f"{gateway}/api/threads/{created.json()['id']}/messages")
    return urls


# -- side by side: the direct upstream, the gateway, and what it is compared with ------------

@dataclass(frozen=True)
class Side:
    """One column of the interleaved steps: the direct upstream, a build of the gateway
    (native turns, each on a fresh thread) or an OpenAI-compatible proxy of the same upstream
    (streamed chat completions). `pid` None: its CPU is not read. `label` heads its columns."""

    name: str
    label: str
    base: str
    pid: int | None
    native: bool = False

    @property
    def turn(self) -> Turn:
        return gateway_turn if self.native else direct_turn

    async def targets(self, client: httpx.AsyncClient, n: int) -> list[str]:
        return await new_threads(client, self.base, n) if self.native else [self.base] * n


def in_turn(count: int, round_: int) -> list[int]:
    """The order the sides run in a round: the direct upstream first, the others in turn
    forward, then backward, so that none always follows the same one (an order effect, the
    one after the upstream's burst of turns, seen as a difference between builds)."""
    others = list(range(1, count))
    return [0, *(others if round_ % 2 == 0 else reversed(others))]


async def warm_up(client: httpx.AsyncClient, sides: Sequence[Side], turns: int,
                  deadline: float) -> None:
    """Turns whose cost is not counted: the first ones of a process pay for imports,
    compiled statements and connections that every later turn reuses."""
    for side in sides:
        await run_batch(side.turn, client, await side.targets(client, turns), 10, deadline)


async def sides_cpu(client: httpx.AsyncClient, sides: Sequence[Side], turns: int,
                    deadline: float) -> list[float | None]:
    """Each side's CPU ms per turn (its process and children), 10 concurrent, in halves
    interleaved so that the machine's drift hits every side alike. Paced, a turn's CPU is
    still only what its process spent: the waits between tokens cost none."""
    spent = [0.0] * len(sides)
    half = max(1, turns // 2)
    for round_ in range(2):
        for index in in_turn(len(sides), round_):
            side = sides[index]
            targets = await side.targets(client, half)
            before = tree_cpu_seconds(side.pid) if side.pid else 0.0
            await run_batch(side.turn, client, targets, 10, deadline)
            if side.pid:
                spent[index] += tree_cpu_seconds(side.pid) - before
    return [spent[index] * 1000 / (2 * half) if side.pid else None
            for index, side in enumerate(sides)]


async def sides_first_delta(client: httpx.AsyncClient, sides: Sequence[Side], concurrency: int,
                            turns: int, deadline: float) -> list[Batch]:
    """Each side's first deltas at `concurrency`, the sides interleaved in halves."""
    batches = [Batch() for _ in sides]
    half = max(concurrency, turns // 2)
    for round_ in range(2):
        for index in in_turn(len(sides), round_):
            side, batch = sides[index], batches[index]
            targets = await side.targets(client, half)
            batch.add(await run_batch(side.turn, client, targets, concurrency, deadline))
    return batches


# -- the measurements ------------------------------------------------------------------------

@dataclass
class Bench:
    upstream: str
    gateway: str
    upstream_pid: int
    gateway_pid: int
    deadline: float
    client: httpx.AsyncClient
    #: The open-streams step reads RSS this long after the idle moment and after the
    #: streams opened (see rss_per_stream).
    rss_settle_s: float = 0.0

    async def threads(self, n: int) -> list[str]:
        """n fresh threads' message URLs (one turn each, so no history grows)."""
        return await new_threads(self.client, self.gateway, n)

    async def gateway_cpu(self, targets: list[str], text: str) -> float:
        """The gateway's CPU ms per turn for one turn on each target, 10 concurrent."""
        async def turn(client: httpx.AsyncClient, url: str) -> float:
            return await gateway_turn(client, url, text)

        before = cpu_seconds(self.gateway_pid)
        await run_batch(turn, self.client, targets, 10, self.deadline)
        return (cpu_seconds(self.gateway_pid) - before) * 1000 / len(targets)

    async def long_answer_cost(self, turns: int, tokens: int, long_tokens: int,
                               rounds: int = COST_ROUNDS) -> tuple[float, float]:
        """(ms per `tokens` turn, ms per `long_tokens` turn): the medians of `rounds` rounds
        of `turns` // 2 turns each, interleaved."""
        short, long = [], []
        for _ in range(rounds):
            short.append(await self.gateway_cpu(await self.threads(turns // 2), "hello"))
            long.append(await self.gateway_cpu(await self.threads(turns // 2),
                                               f"hello [tokens={long_tokens}]"))
        return statistics.median(short), statistics.median(long)

    async def history_cost(self, turns: int, history: int, database_url: str,
                           rounds: int = COST_ROUNDS, settle_turns: int = SETTLE_TURNS
                           ) -> tuple[float, float]:
        """(ms per turn on a fresh thread, ms per turn on a thread with `history` prior
        messages): the medians of `rounds` rounds. Each round seeds its threads, runs
        `settle_turns` turns it does not count, then measures both kinds, each going first
        in every other round. The first turns after a seeding pay for what its writes leave
        (the log's checkpoint, the page cache read again), and a turn's inserts cost more
        as the database grows: so both kinds run on a database of the same size, after the
        same settling."""
        fresh, seeded = [], []
        for round_ in range(rounds):
            targets = await self.threads(turns // 2)
            await seed_history(database_url, targets, history)
            if settle_turns:
                await self.gateway_cpu(await self.threads(settle_turns), "hello")
            fresh_targets = await self.threads(turns // 2)
            fresh_first = round_ % 2 == 0
            if not fresh_first:
                seeded.append(await self.gateway_cpu(targets, "hello"))
            fresh.append(await self.gateway_cpu(fresh_targets, "hello"))
            if fresh_first:
                seeded.append(await self.gateway_cpu(targets, "hello"))
        return statistics.median(fresh), statistics.median(seeded)

    async def first_delta_at_rate(self, rate: float, turns: int) -> tuple[Batch, Batch]:
        """As first_delta, turns started at a fixed rate (paced_batch)."""
        direct, through = Batch(), Batch()
        for _ in range(2):
            half = max(2, turns // 2)
            direct.add(await paced_batch(direct_turn, self.client, [self.upstream] * half,
                                         rate, self.deadline))
            through.add(await paced_batch(gateway_turn, self.client, await self.threads(half),
                                          rate, self.deadline))
        return direct, through

    async def rss_per_stream(self, streams: int) -> tuple[float, int, int, Counter[str]]:
        """(KB per open stream, streams open when measured, the gateway's open file
        descriptors then, how the others failed). Waits until every stream has had its
        first delta or none started for OPEN_STALL_S, then reads RSS and fds while all that
        started are still held open (a slow stream lasts over a minute). Both RSS readings
        wait `rss_settle_s`: the gateway hands the memory it freed back to the system every
        app.process.heap.TRIM_INTERVAL_S, and what it still holds between two rounds is neither the
        idle process's nor the streams'."""
        targets = await self.threads(streams)
        await asyncio.sleep(self.rss_settle_s)
        idle = rss_kb(self.gateway_pid)
        progress = asyncio.Event()
        open_now = 0
        failures: Counter[str] = Counter()

        async def hold(url: str) -> None:
            nonlocal open_now
            try:
                async with self.client.stream("POST", url, json={"content": "[slow]"}) as r:
                    await check_status(r)
                    event = ""
                    async for line in r.aiter_lines():
                        if line.startswith("event: "):
                            event = line.removeprefix("event: ")
                        if line == "event: delta":
                            open_now += 1
                            progress.set()
                            try:
                                await asyncio.sleep(3600)  # held open; cancelled below
                            finally:
                                open_now -= 1
                        elif event == "error" and line.startswith("data:"):
                            raise Failed(f"error event {error_event_code(line)}")
                raise Failed("ended before its first delta")
            except Failed as failed:
                failures[failed.kind] += 1
            except httpx.HTTPError as error:
                failures[type(error).__name__] += 1
            finally:
                progress.set()

        tasks = [asyncio.create_task(hold(url)) for url in targets]
        while open_now < streams and not all(task.done() for task in tasks):
            progress.clear()
            wait = min(OPEN_STALL_S, self.deadline - time.monotonic())
            if wait <= 0:
                break
            try:
                await asyncio.wait_for(progress.wait(), wait)
            except TimeoutError:
                break
        await asyncio.sleep(min(self.rss_settle_s, max(0.0, self.deadline - time.monotonic())))
        opened = open_now
        busy = rss_kb(self.gateway_pid)
        fds = len(list(Path(f"/proc/{self.gateway_pid}/fd").iterdir()))
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.drained()
        return (busy - idle) / max(1, opened), opened, fds, failures

    async def drained(self) -> None:
        """Until the gateway streams nothing (its `chatgate_active_streams`): streams whose
        client left run on for the resume grace, holding upstream slots a later step would
        be refused for. Bounded by DRAIN_WAIT_S and the deadline."""
        until = min(self.deadline, time.monotonic() + DRAIN_WAIT_S)
        while time.monotonic() < until:
            metrics = (await self.client.get(f"{self.gateway}/metrics")).text
            if active_streams(metrics) == 0:
                return
            await asyncio.sleep(0.5)


async def seed_history(database_url: str, thread_urls: list[str], messages: int) -> None:
    """`messages` prior messages on each thread, through the store: questions and answers
    of the size the benchmark's turns have (more than the context budget holds, so the
    window is cut and memory recall runs, as on a long real thread)."""
    answer = "".join(f"w{i} " for i in range(100))
    db = Database(database_url)
    rows = turn_rows(db)
    try:
        for url in thread_urls:
            thread_id = uuid.UUID(url.rsplit("/", 2)[-2])
            for n in range(messages // 2):
                opened = await rows.open(OpeningRequest(
                    LOCAL_USER, thread_id, f"question {n} about the benchmark"))
                assert isinstance(opened, Opened), f"thread {thread_id} did not open"
                await rows.finish(FinishedMessage(
                    opened.assistant.id, answer, {"tokens": 100}, "complete"))
    finally:
        await db.dispose()


async def turns_finished(client: httpx.AsyncClient, turn: Turn, targets: list[str],
                         concurrency: int, deadline: float, failures: Counter[str]) -> int:
    """Turns that streamed to their end; how the others failed is added to `failures`."""
    batch = await run_batch(turn, client, targets, concurrency, deadline)
    failures.update(batch.kinds)
    return len(batch.firsts)


def children_of(pid: int) -> list[int]:
    """A process's children (uvicorn's workers)."""
    return [int(child) for child in
            Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def tree_cpu_seconds(pid: int) -> float:
    """CPU seconds of a process and of its children (uvicorn's workers) so far."""
    return cpu_seconds(pid) + sum(cpu_seconds(child) for child in children_of(pid))


def machine_ticks() -> tuple[int, int]:
    """(busy, all) CPU ticks of the whole machine so far, every core together (/proc/stat)."""
    ticks = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    idle = ticks[3] + ticks[4]  # idle, iowait
    return sum(ticks) - idle, sum(ticks)


@dataclass
class Column:
    """One column of the workers step (the direct upstream, one gateway process, several
    workers), added up over its halves: turns per second; how busy the machine's cores were
    meanwhile (0 to 1), where a ratio of workers measured near 1 is the machine's limit, not
    the gateway's; and CPU ms per turn (the workers' together), where the same figure in
    both gateway columns says that the workers cost nothing of each other and would scale
    with the cores they are given. `failed`: how its other turns failed."""

    finished: int = 0
    seconds: float = 0.0
    busy_ticks: int = 0
    all_ticks: int = 0
    cpu_seconds: float = 0.0
    #: The load generator's own CPU (this process): it shares the cores it measures.
    generator_seconds: float = 0.0
    failed: Counter[str] = field(default_factory=Counter)
    #: CPU seconds of each process of the tree (uvicorn's supervisor and each worker).
    process_seconds: dict[int, float] = field(default_factory=dict)
    #: The threads its turns ran on (a gateway column's), to find which process served each.
    thread_ids: list[uuid.UUID] = field(default_factory=list)
    #: What the database's sessions waited on meanwhile (--sample-waits), and the samples.
    waits: Counter[str] = field(default_factory=Counter)
    samples: int = 0

    async def measure(self, pid: int, run: Awaitable[int],
                      sampler: WaitSampler | None = None) -> None:
        """`run`'s turns, timed, with the machine's ticks and the CPU of `pid`'s tree."""
        busy, total = machine_ticks()
        cpu, began = tree_cpu_seconds(pid), time.perf_counter()
        each = process_cpu_seconds(pid)
        own = time.process_time()
        sampling = asyncio.create_task(sampler.sample(self)) if sampler else None
        try:
            self.finished += await run
        finally:
            if sampling is not None:
                sampling.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await sampling
        self.seconds += time.perf_counter() - began
        self.generator_seconds += time.process_time() - own
        self.cpu_seconds += tree_cpu_seconds(pid) - cpu
        for child, seconds in process_cpu_seconds(pid).items():
            self.process_seconds[child] = (self.process_seconds.get(child, 0.0) + seconds
                                           - each.get(child, 0.0))
        after = machine_ticks()
        self.busy_ticks += after[0] - busy
        self.all_ticks += after[1] - total

    def rate(self) -> float:
        return self.finished / self.seconds if self.seconds else 0.0

    def busy(self) -> float:
        return self.busy_ticks / self.all_ticks if self.all_ticks else 0.0

    def cpu_ms(self) -> float:
        return self._ms_per_turn(self.cpu_seconds)

    def generator_ms(self) -> float:
        return self._ms_per_turn(self.generator_seconds)

    def _ms_per_turn(self, seconds: float) -> float:
        return seconds * 1000 / self.finished if self.finished else float("nan")

    def headroom(self) -> float:
        """How many times this column's turns a second the machine's cores could carry if
        each turn kept costing every process (the load generator, the upstream, the database
        and the gateway) what it cost here: 1 / busy(). The upstream and the load generator
        share the gateway's cores, so this, not the gateway, bounds the workers' ratio unless
        the machine's cost per turn changes with the load: a ratio above it says that cost
        fell (a busier process does more per wake-up), one well below it that the workers
        lost CPU to each other or to the machine."""
        busy = self.busy()
        return 1 / busy if busy else float("nan")


def process_cpu_seconds(pid: int) -> dict[int, float]:
    """CPU seconds so far of a process and of each of its children, by pid."""
    return {each: cpu_seconds(each) for each in (pid, *children_of(pid))}


@dataclass(frozen=True)
class Users:
    """The workers step's callers: one API key each, their turns and threads round robin
    (`--users`). One user is one busy key: one rollup row, one stream-cap lock."""

    keys: list[str]

    @property
    def headers(self) -> list[dict[str, str]]:
        return [{"Authorization": f"Bearer {key}"} for key in self.keys]

    async def targets(self, gateway: Bench, n: int) -> tuple[list[str], Turn]:
        """n fresh threads spread over the users, and the turn that sends each thread's
        owner's key."""
        headers = self.headers
        urls = await new_threads(gateway.client, gateway.gateway, n, headers)
        owner = {url: headers[index % len(headers)] for index, url in enumerate(urls)}

        async def turn(client: httpx.AsyncClient, url: str) -> float:
            return await gateway_turn(client, url, headers=owner[url])

        return urls, turn


async def new_users(database_url: str, count: int) -> Users:
    """`count` users with a key each, made through the store (keys are shown only once)."""
    db = Database(database_url)
    keys = []
    try:
        async with db.transaction() as session:
            for n in range(count):
                _, plaintext = await create_key(session, f"bench-user-{uuid.uuid4().hex[:8]}-{n}",
                                                "bench")
                keys.append(plaintext)
    finally:
        await db.dispose()
    return Users(keys)


def thread_of(url: str) -> uuid.UUID:
    return uuid.UUID(url.rsplit("/", 2)[-2])


async def worker_scaling(bench: Bench, other: Bench, turns: int, concurrency: int,
                         users: Users, sampler: WaitSampler | None = None
                         ) -> tuple[Column, Column, Column]:
    """The three columns, interleaved in halves, after a few turns on each gateway that are
    not counted (a fresh process pays for imports, compiled statements and connections)."""
    direct, one, several = Column(), Column(), Column()
    async with bench.client, other.client:
        for gateway in (bench, other):
            targets, turn = await users.targets(gateway, min(turns, 2 * concurrency))
            await run_batch(turn, gateway.client, targets, concurrency, gateway.deadline)
        for _ in range(2):
            await direct.measure(bench.upstream_pid, turns_finished(
                bench.client, direct_turn, [bench.upstream] * (turns // 2), concurrency,
                bench.deadline, direct.failed))
            for column, gateway in ((one, bench), (several, other)):
                targets, turn = await users.targets(gateway, turns // 2)
                column.thread_ids += [thread_of(url) for url in targets]
                await column.measure(gateway.gateway_pid, turns_finished(
                    gateway.client, turn, targets, concurrency, gateway.deadline,
                    column.failed), sampler)
    for name, column in zip(("direct", "1 process", "workers"), (direct, one, several),
                            strict=True):
        if column.failed:
            console.print(f"workers step, {name} failed: {dict(column.failed)}",
                          highlight=False)
    return direct, one, several


async def served_by(database_url: str, thread_ids: list[uuid.UUID]) -> Counter[int]:
    """How many of these threads' answers each gateway process served, by its pid: the
    answer's row names its process (`stream_process`), which registered its pid. Read while
    the processes still run (a process leaves the registry when it stops); 0: not found."""
    db = Database(database_url)
    served: Counter[int] = Counter()
    try:
        async with db.transaction(read_only=True) as session:
            rows = await session.execute(
                select(GatewayProcess.pid, func.count())
                .select_from(Message)
                .outerjoin(GatewayProcess, GatewayProcess.id == Message.stream_process)
                .where(Message.role == "assistant", Message.thread_id.in_(thread_ids))
                .group_by(GatewayProcess.pid))
            for pid, count in rows:
                served[pid or 0] += count
            for pid in await session.scalars(select(GatewayProcess.pid)):
                served.setdefault(pid, 0)  # a registered process that served no turn
    finally:
        await db.dispose()
    return served


def report_scaling(columns: tuple[Column, Column, Column], workers: int, concurrency: int,
                   users: int) -> None:
    direct, one, several = columns
    ratio = f"{several.rate() / one.rate():.2f}x" if one.rate() else "n/a: no turn finished"
    console.print(
        f"turns per second at {concurrency} concurrent, {plural(users, 'user')}: direct "
        f"upstream {direct.rate():.1f}, "
        f"gateway 1 process {one.rate():.1f}, {workers} workers {several.rate():.1f} "
        f"({ratio}); the machine's {os.cpu_count()} cores busy meanwhile: "
        + ", ".join(f"{c.busy():.0%}" for c in columns)
        + "; CPU ms per turn: " + ", ".join(f"{c.cpu_ms():.1f}" for c in columns)
        + "; the load generator's: " + ", ".join(f"{c.generator_ms():.1f}" for c in columns)
        + f"; the cores' headroom at one process's cost per turn: {one.headroom():.2f}x",
        highlight=False)


def plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def report_shares(name: str, column: Column, served: Counter[int]) -> None:
    """Each process's share of a gateway column's turns and its CPU ms per turn it served
    (uvicorn's supervisor serves none: its CPU is counted apart)."""
    total = sum(served.values())
    parts, rest = [], 0.0
    for pid, seconds in sorted(column.process_seconds.items()):
        if pid not in served:
            rest += seconds
            continue
        count = served[pid]
        parts.append(f"pid {pid} {count} turns ({count / max(1, total):.0%}), "
                     + (f"{seconds * 1000 / count:.1f} ms CPU per turn" if count
                        else f"{seconds * 1000:.0f} ms CPU"))
    if len(column.process_seconds) > len(parts):
        parts.append(f"uvicorn's supervisor and helpers {rest * 1000:.0f} ms CPU")
    unknown = served.get(0, 0)
    if unknown:
        parts.append(f"{unknown} turns by no process found")
    console.print(f"{name}: each process's share of {total} turns: " + "; ".join(parts)
                  + f"; CPU per turn all together {column.cpu_ms():.1f} ms", highlight=False)


def report_waits(name: str, column: Column) -> None:
    """What the database's sessions were seen waiting on during a column's turns: each wait
    as the share of samples that saw at least one session waiting on it, and the mean number
    of such sessions per sample."""
    if not column.samples:
        return
    top = ", ".join(f"{wait} {count / column.samples:.2f}" for wait, count
                    in column.waits.most_common(8)) or "nothing"
    console.print(f"{name}: database sessions waiting, mean per sample over "
                  f"{column.samples} samples: {top}", highlight=False, soft_wrap=True)


class WaitSampler:
    """pg_stat_activity and ungranted pg_locks of the bench's database, sampled while a
    column's turns run (`--sample-waits`): what the gateway's sessions wait on, e.g. a
    `Lock:advisory` (the stream-cap lock), `Lock:transactionid` or `Lock:tuple` (a row
    another transaction updates: the day's rollup row, the rate-limit window),
    `LWLock:WALWrite` / `IO:WALSync` (commits). Its own sampling connection is left out."""

    def __init__(self, database_url: str, interval_s: float = 0.02) -> None:
        self.url, self.interval_s = database_url, interval_s

    async def sample(self, column: Column) -> None:
        engine = create_async_engine(self.url, poolclass=NullPool)
        try:
            async with engine.connect() as connection:
                while True:
                    rows = await connection.execute(WAITING)
                    column.samples += 1
                    for wait, what, count in rows:
                        column.waits[f"{wait} ({what})" if what else wait] += count
                    await connection.rollback()
                    await asyncio.sleep(self.interval_s)
        finally:
            await engine.dispose()


#: The sessions of this database (but the sampler's) waiting, by wait event; for a lock
#: wait, on what (an advisory lock, a row's transaction, a tuple of which table).
WAITING = text(r"""
SELECT a.wait_event_type || ':' || a.wait_event
       || CASE WHEN a.state <> 'active' THEN ' ' || a.state ELSE '' END AS wait,
       coalesce(l.locktype || coalesce(' ' || l.relation::regclass::text, '') || ', ',
                CASE WHEN a.state <> 'active' THEN 'after ' END)
       || left(regexp_replace(a.query, '\s+', ' ', 'g'), 60) AS what,
       count(*)
FROM pg_stat_activity a
LEFT JOIN pg_locks l ON l.pid = a.pid AND NOT l.granted
WHERE a.datname = current_database() AND a.pid <> pg_backend_pid()
  AND a.wait_event IS NOT NULL AND a.state <> 'idle'
GROUP BY 1, 2
""")


def ratio_text(numerator: float, denominator: float) -> str:
    """/proc counts CPU in clock ticks (10 ms): a short run may see none at all."""
    return f"{numerator / denominator:.1f}x" if denominator > 0 else "n/a (too short)"


def report_cpu(sides: Sequence[Side], cpu: Sequence[float | None], tokens: int) -> None:
    """The upstream's and the gateway's line, then one for each side compared with them."""
    upstream_ms, gateway_ms = cpu[0] or 0.0, cpu[1] or 0.0
    ratio = ratio_text(gateway_ms, upstream_ms)
    console.print(f"CPU per {tokens}-token turn (10 concurrent): upstream {upstream_ms:.1f} ms, "
                  f"gateway {gateway_ms:.1f} ms, ratio {ratio}", highlight=False)
    for side, ms in zip(sides[2:], cpu[2:], strict=True):
        console.print(f"{side.name}: CPU per turn (10 concurrent) {ms:.1f} ms, ratio "
                      f"{ratio_text(ms, upstream_ms)}" if ms is not None else
                      f"{side.name}: CPU per turn not read (no pid given)", highlight=False)


def report_side_by_side(sides: Sequence[Side], cpu: Sequence[float | None], levels: list[int],
                        results: Sequence[Sequence[Batch]]) -> None:
    """One row for each side but the direct upstream: its CPU per turn and what it adds to
    the direct first delta at each concurrency (p50 / p99), all measured interleaved."""
    table = Table(title="side by side, interleaved: CPU ms per turn (10 concurrent) and "
                        "the first delta added to the direct upstream's (ms, p50 / p99)")
    for column in ("", "CPU ms/turn", *(f"added at {c}" for c in levels), "errors"):
        table.add_column(column, justify="right")
    for index, side in enumerate(sides[1:], 1):
        added = []
        for batches in results:
            direct, through = batches[0].firsts, batches[index].firsts
            added.append(f"{(pct(through, .5) - pct(direct, .5)) * 1000:+.1f} / "
                         f"{(pct(through, .99) - pct(direct, .99)) * 1000:+.1f}")
        ms = cpu[index]
        table.add_row(side.name, "n/a" if ms is None else f"{ms:.1f}", *added,
                      str(sum(batches[index].errors for batches in results)))
    console.print(table)
    direct_text = ", ".join(f"{pct(b[0].firsts, .5) * 1000:.1f} / "
                            f"{pct(b[0].firsts, .99) * 1000:.1f} at {c}"
                            for c, b in zip(levels, results, strict=True))
    console.print(f"direct upstream: CPU {cpu[0] or 0.0:.1f} ms per turn, first delta "
                  f"(p50 / p99 ms) {direct_text}", highlight=False)


def report_first_delta(levels: Sequence[tuple[float, Batch, Batch]], via: str = "gateway",
                       title: str = "time to the first delta (ms)",
                       level: str = "concurrency") -> None:
    table = Table(title=title)
    for column in (level, "direct p50", "direct p99", f"{via} p50", f"{via} p99",
                   "added p50", "added p99", "errors", "refused"):
        table.add_column(column, justify="right")
    for concurrency, direct, through in levels:
        d50, d99 = pct(direct.firsts, 0.5) * 1000, pct(direct.firsts, 0.99) * 1000
        g50, g99 = pct(through.firsts, 0.5) * 1000, pct(through.firsts, 0.99) * 1000
        table.add_row(f"{concurrency:g}", f"{d50:.1f}", f"{d99:.1f}", f"{g50:.1f}", f"{g99:.1f}",
                      f"{g50 - d50:.1f}", f"{g99 - d99:.1f}",
                      str(direct.errors + through.errors), str(through.refused))
    console.print(table)
    for concurrency, direct, through in levels:
        if direct.kinds or through.kinds:
            console.print(f"failures at {concurrency:g} {level}: direct {dict(direct.kinds)}, "
                          f"{via} {dict(through.kinds)}", highlight=False)


@dataclass(frozen=True)
class Extra:
    """The linear-cost measurements: 0 skips one."""

    tokens: int
    long_tokens: int
    history: int
    database_url: str
    rates: list[float]
    rounds: int = COST_ROUNDS
    settle_turns: int = SETTLE_TURNS


async def measure(bench: Bench, sides: list[Side], turns: int, levels: list[int],
                  open_streams: int, extra: Extra) -> None:
    """Each figure printed as soon as it is measured. `sides` are the direct upstream, the
    gateway, then what they are compared with: the steps that measure them all interleave
    them; the others measure the gateway alone."""
    async with bench.client:
        await warm_up(bench.client, sides, turns, bench.deadline)
        cpu = await sides_cpu(bench.client, sides, turns, bench.deadline)
        report_cpu(sides, cpu, extra.tokens)
        if open_streams:
            # Before the loads: memory freed after 500 streams would be reused by the open
            # ones without growing RSS, and the figure would miss it.
            await report_rss(bench, open_streams)
        await report_linear_cost(bench, turns, extra)
        results = [await sides_first_delta(bench.client, sides, concurrency, turns,
                                           bench.deadline) for concurrency in levels]
        report_first_delta([(c, r[0], r[1]) for c, r in zip(levels, results, strict=True)])
        for index, side in enumerate(sides[2:], 2):
            report_first_delta([(c, r[0], r[index]) for c, r in zip(levels, results,
                                                                      strict=True)],
                               side.label, f"{side.name}: time to the first delta (ms)")
        if len(sides) > 2:
            report_side_by_side(sides, cpu, levels, results)
        if extra.rates:
            paced = [(rate, *await bench.first_delta_at_rate(rate, turns))
                     for rate in extra.rates]
            report_first_delta(paced, title="time to the first delta at a fixed rate (ms)",
                               level="turns/s")


async def report_rss(bench: Bench, open_streams: int) -> None:
    per_stream, opened, fds, failures = await bench.rss_per_stream(open_streams)
    console.print(f"RSS per open stream: {per_stream:.0f} KB ({opened} of {open_streams} "
                  f"slow streams open when measured, {fds} gateway file descriptors"
                  f"{', failed: ' + str(dict(failures)) if failures else ''})",
                  highlight=False)


async def report_linear_cost(bench: Bench, turns: int, extra: Extra) -> None:
    if extra.long_tokens:
        short, long = await bench.long_answer_cost(turns, extra.tokens, extra.long_tokens,
                                                   extra.rounds)
        console.print(f"CPU per turn, {extra.tokens} vs {extra.long_tokens} tokens: "
                      f"{short:.1f} ms vs {long:.1f} ms, ratio {ratio_text(long, short)} "
                      f"(tokens ratio {extra.long_tokens / extra.tokens:.0f}x)",
                      highlight=False)
    if extra.history:
        fresh, seeded = await bench.history_cost(turns, extra.history, extra.database_url,
                                                 extra.rounds, extra.settle_turns)
        console.print(f"CPU per turn, fresh thread vs {extra.history} prior messages: "
                      f"{fresh:.1f} ms vs {seeded:.1f} ms, added {seeded - fresh:+.1f} ms",
                      highlight=False)


@dataclass(frozen=True)
class Plan:
    """What to start: the upstream's answers, the databases, and what the gateway is
    compared with."""

    tokens: int
    pace_ms: float
    database_url: str | None
    upstream_port: int | None
    baseline_root: Path | None
    litellm: bool
    compare_url: str | None
    compare_pid: int | None

    def describe(self) -> str:
        pace = (f"{self.pace_ms:g} ms apart, each its own event and write (a turn streams "
                f"for {self.tokens * self.pace_ms / 1000:.1f} s)" if self.pace_ms
                else "back to back (--pace-ms 0)")
        return f"{self.tokens} tokens a turn, {pace}"


@dataclass
class Started:
    """The processes a run started, and the sides they are measured as."""

    upstream: str
    gateway: str
    upstream_pid: int
    gateway_pid: int
    database_url: str
    sides: list[Side] = field(default_factory=list)


def start_all(stack: contextlib.ExitStack, plan: Plan, scratch: Path,
              pinning: Pinning | None) -> Started:
    """The upstream and the gateway, then the baseline build and LiteLLM's proxy when asked;
    `stack` stops them all (the last started first)."""
    url = plan.database_url or f"sqlite+aiosqlite:///{scratch}/bench.db"
    asyncio.run(upgrade_to_head(url))
    up_port, gw_port = plan.upstream_port or free_port(), free_port()
    upstream = f"http://127.0.0.1:{up_port}/v1"
    gateway = f"http://127.0.0.1:{gw_port}"
    up_process = stack.enter_context(running(upstream_argv(up_port, plan.tokens, plan.pace_ms),
                                             dict(os.environ)))
    gw_process = stack.enter_context(running(gateway_argv(gw_port),
                                             gateway_env(upstream, url)))
    if pinning is not None:
        pinning.starting(gw_process.pid)
    baseline = (start_baseline(stack, plan.baseline_root, upstream, url, scratch)
                if plan.baseline_root is not None else None)
    up = once_up(up_process, f"http://127.0.0.1:{up_port}/healthz")
    gw = once_up(gw_process, f"{gateway}/healthz")
    run = Started(upstream, gateway, up, gw, url, [
        Side("direct upstream", "direct", upstream, up),
        Side(f"gateway {tree_commit(ROOT)}", "gateway", gateway, gw, native=True)])
    if baseline is not None:
        run.sides.append(baseline())
    if plan.litellm:
        run.sides.append(start_litellm(stack, upstream, scratch))
    if plan.compare_url:
        run.sides.append(Side(f"compare {plan.compare_url}", "proxy", plan.compare_url,
                              plan.compare_pid))
    if pinning is not None:
        for side in run.sides[1:]:
            if side.pid and side.name != f"compare {plan.compare_url}":
                pinning.apply_to(side.pid)
    return run


def tree_commit(root: Path) -> str:
    """A tree's short commit, `+` when its tracked files differ from it."""
    def git(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                              timeout=30)

    commit = git("rev-parse", "--short", "HEAD").stdout.strip() or "?"
    return commit + ("+" if git("diff", "--quiet", "HEAD").returncode else "")


def upstream_argv(port: int, tokens: int, pace_ms: float) -> list[str]:
    """The bench upstream as a process of its own (scripts/bench_upstream.py), which imports
    none of what this script does."""
    return [sys.executable, str(Path(__file__).with_name("bench_upstream.py")), str(port),
            "--tokens", str(tokens), "--pace-ms", str(pace_ms)]


def start_baseline(stack: contextlib.ExitStack, root: Path, upstream: str, url: str,
                   scratch: Path) -> Callable[[], Side]:
    """Another tree's gateway (`--baseline-root`) on the same venv's python, that tree first
    on its path, on a database of its own migrated by that tree's code. Started, not waited
    for: the result gives its side once it answers."""
    root = root.resolve()
    env = {**gateway_env(upstream, "unset"), "PYTHONPATH": str(root)}
    where = subprocess.run([sys.executable, "-c", "import app; print(app.__file__)"], cwd=root,
                           env=env, capture_output=True, text=True, timeout=60, check=True)
    if not Path(where.stdout.strip()).resolve().is_relative_to(root):
        raise RuntimeError(f"--baseline-root {root}: `app` imports from {where.stdout.strip()}")
    database = stack.enter_context(baseline_database(url, scratch))
    env["CHATGATE_DATABASE_URL"] = database
    subprocess.run([sys.executable, "-c", MIGRATE, database], cwd=root, env=env, check=True,
                   timeout=300)
    port = free_port()
    factory = factory_of(root) or FACTORIES[0][1]
    log = scratch / "baseline.log"
    process = stack.enter_context(running(gateway_argv(port, factory), env, cwd=root, log=log))

    def side() -> Side:
        pid = once_up(process, f"http://127.0.0.1:{port}/healthz", log=log)
        return Side(f"baseline {tree_commit(root)}", "baseline", f"http://127.0.0.1:{port}",
                    pid, native=True)

    return side


#: Run by the baseline tree's python: that tree's migrations on its scratch database.
MIGRATE = ("import asyncio, sys\nfrom app.store.migrations import upgrade_to_head\n"
           "asyncio.run(upgrade_to_head(sys.argv[1]))")


@contextlib.contextmanager
def baseline_database(url: str, scratch: Path) -> Iterator[str]:
    """The baseline gateway's database: a scratch SQLite file beside the gateway's, or on
    PostgreSQL a fresh database on the same server, dropped at the end."""
    if not url.startswith("postgresql"):
        yield f"sqlite+aiosqlite:///{scratch}/baseline.db"
        return
    server = make_url(url)
    name = f"{server.database}_baseline_{uuid.uuid4().hex[:8]}"
    asyncio.run(admin_statement(server, f'CREATE DATABASE "{name}"'))
    try:
        yield server.set(database=name).render_as_string(hide_password=False)
    finally:
        asyncio.run(admin_statement(server, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


async def admin_statement(server: URL, statement: str) -> None:
    """One statement outside a transaction, on the server's `postgres` database."""
    engine = create_async_engine(server.set(database="postgres"), poolclass=NullPool,
                                 isolation_level="AUTOCOMMIT")
    try:
        async with engine.connect() as connection:
            await connection.execute(text(statement))
    finally:
        await engine.dispose()


def start_litellm(stack: contextlib.ExitStack, upstream: str, scratch: Path) -> Side:
    """LiteLLM's proxy from the client tests' cached venv (scripts/bench_litellm.py), on the
    same upstream; its start command printed as it ran."""
    venv = bench_litellm.ensure_litellm_proxy()
    config = scratch / "litellm.yaml"
    config.write_text(bench_litellm.proxy_config(upstream))
    port = free_port()
    argv = bench_litellm.proxy_argv(venv, config, port)
    console.print(f"LiteLLM's proxy: {bench_litellm.start_command(argv)}\nwith {config}:\n"
                  + config.read_text().rstrip(), highlight=False, soft_wrap=True)
    pid = stack.enter_context(started(
        argv, bench_litellm.proxy_env(), f"http://127.0.0.1:{port}{bench_litellm.HEALTH_PATH}",
        cwd=scratch, timeout=bench_litellm.START_TIMEOUT_S, log=scratch / "litellm.log"))
    return Side(f"litellm {bench_litellm.litellm_version()}", "litellm",
                f"http://127.0.0.1:{port}/v1", pid)


def measure_workers(run: Started, workers: int, concurrency: int, turns: int,
                    deadline: float, pinning: Pinning | None, users: int,
                    sample_waits: bool, redis_url: str | None = None) -> None:
    """One gateway process against `workers` workers, both their own (API keys on, one for
    each of `users` users), on the run's database (and `redis_url`'s Redis, when given)."""
    people = asyncio.run(new_users(run.database_url, users))
    env = {**gateway_env(run.upstream, run.database_url), "CHATGATE_AUTH_MODE": "keys"}
    if redis_url is not None:
        env |= {"CHATGATE_REDIS_URL": redis_url,
                "CHATGATE_REDIS_PREFIX": f"bench_{os.getpid()}"}
    one_port, several_port = free_port(), free_port()
    one_url, several = f"http://127.0.0.1:{one_port}", f"http://127.0.0.1:{several_port}"
    argv = gateway_argv(several_port, workers=workers)
    sampler = None
    if sample_waits and run.database_url.startswith("postgresql"):
        sampler = WaitSampler(run.database_url)
    with (running(gateway_argv(one_port), env) as one_process,
          running(argv, env) as several_process):
        if pinning is not None:
            pinning.starting(one_process.pid)
            pinning.starting(several_process.pid)
        one_pid = once_up(one_process, f"{one_url}/healthz")
        pid = once_up(several_process, f"{several}/healthz")
        if pinning is not None:
            pinning.apply_to(one_pid)
            pinning.apply_to(pid)
        other = Bench(run.upstream, several, run.upstream_pid, pid, deadline, new_client())
        bench = Bench(run.upstream, one_url, run.upstream_pid, one_pid, deadline, new_client())
        columns = asyncio.run(worker_scaling(bench, other, turns, concurrency, people, sampler))
        shares = [asyncio.run(served_by(run.database_url, column.thread_ids))
                  for column in columns[1:]]
    report_scaling(columns, workers, concurrency, users)
    for name, column, served in zip(("1 process", f"{workers} workers"), columns[1:], shares,
                                    strict=True):
        report_shares(name, column, served)
        report_waits(name, column)


@app.command()
def main(
    turns: int = typer.Option(60, min=2, max=5000),
    tokens: int = typer.Option(100, min=1, max=10000),
    pace_ms: float = typer.Option(
        10.0, min=0.0, max=1000.0,
        help="the upstream's time between two tokens, each its own event and write "
             "(0: an answer's tokens back to back)"),
    concurrency: str = typer.Option("1,10,100,500"),
    open_streams: int = typer.Option(200, min=0, max=5000, help="0: no RSS measurement"),
    database_url: str | None = typer.Option(None),
    baseline_root: str | None = typer.Option(
        None,
        help="another tree of the project (e.g. a git worktree of an older commit): its "
             "gateway is measured beside this one's, interleaved"),
    litellm: bool = typer.Option(False, "--litellm",
                                 help="LiteLLM's proxy on the same upstream, measured beside "
                                      "the gateway, interleaved"),
    compare_url: str | None = typer.Option(None, "--compare"),
    compare_pid: int | None = typer.Option(None),
    max_seconds: float = typer.Option(600.0, min=5.0, max=3600.0),
    long_tokens: int = typer.Option(1000, min=0, max=10000),
    history: int = typer.Option(100, min=0, max=1000),
    cost_rounds: int = typer.Option(
        COST_ROUNDS, min=1, max=100,
        help="rounds of each linear-cost measurement (--long-tokens, --history), their "
             "median printed"),
    settle_turns: int = typer.Option(
        SETTLE_TURNS, min=0, max=1000,
        help="the --history measurement's turns after each seeding, not counted"),
    workers: int = typer.Option(2, min=0, max=16, help="0: no workers measurement"),
    workers_concurrency: int = typer.Option(20, min=1, max=500),
    users: int = typer.Option(
        1, min=1, max=10000,
        help="the workers step's turns spread over this many users, a key each, round robin "
             "(1: one busy key)"),
    sample_waits: bool = typer.Option(
        False, "--sample-waits",
        help="PostgreSQL: sample what the database's sessions wait on during the workers "
             "step (pg_stat_activity, pg_locks) and print it for each gateway column"),
    redis_url: str | None = typer.Option(
        None, help="the workers step's gateways use this Redis (resumes, stops and the events "
                   "bus, which then sends no NOTIFY), under a key prefix of the run's own"),
    rss_settle_s: float = typer.Option(
        TRIM_INTERVAL_S + 1.0, min=0.0, max=60.0,
        help="the open-streams step's wait before each RSS reading (a slow stream sends "
             "--tokens tokens a second apart: it must outlast the wait)"),
    rates: str = typer.Option("", help="turns a second, e.g. 60,120: the first delta at each "
                                       "fixed arrival rate (none by default)"),
    upstream_port: int | None = typer.Option(
        None, help="the upstream's port (default: a free one), so that a proxy to --compare "
                   "can be pointed at it before the run"),
    gateway_cores: str = typer.Option(
        "", help="e.g. 0 or 0,1: the gateway and its workers run on these cores only, the load "
                 "generator and the upstream on the others (default: all share every core)"),
) -> None:
    # The load generator (and the upstream, scripts/bench_upstream.py) freeze their startup
    # heap and space out their collections as the gateway does (app/process/heap.py): a full
    # collection over the imported packages paused either for 60 to 90 ms, a pause its
    # measurements would have charged to whichever turn it hit.
    freeze_startup_heap()
    space_out_collections()
    levels = [int(c) for c in concurrency.split(",") if c.strip()]
    paced_rates = [float(r) for r in rates.split(",") if r.strip()]
    raise_fd_limit()
    pinning = Pinning.parse(gateway_cores, os.sched_getaffinity(0)) if gateway_cores else None
    if pinning is not None:
        pinning.apply_here()
    deadline = time.monotonic() + max_seconds
    if baseline_root is not None and factory_of(Path(baseline_root)) is None:
        raise typer.BadParameter(f"{baseline_root}: not a tree of this project (no app factory)")
    plan = Plan(tokens, pace_ms, database_url, upstream_port,
                Path(baseline_root) if baseline_root else None, litellm, compare_url,
                compare_pid)
    with (tempfile.TemporaryDirectory(prefix="bench_gateway_") as scratch,
          contextlib.ExitStack() as stack):
        run = start_all(stack, plan, Path(scratch), pinning)
        console.print(plan.describe(), highlight=False, soft_wrap=True)
        console.print(f"{turns} turns a measurement, database "
                      f"{run.database_url.split(':', 1)[0]}"
                      + (f"; {pinning.describe()}" if pinning else ""), highlight=False)
        bench = Bench(run.upstream, run.gateway, run.upstream_pid, run.gateway_pid, deadline,
                      new_client(), rss_settle_s)
        asyncio.run(measure(bench, run.sides, turns, levels, open_streams,
                            Extra(tokens, long_tokens, history, run.database_url,
                                  paced_rates, cost_rounds, settle_turns)))
        if workers > 1:
            measure_workers(run, workers, workers_concurrency, turns, deadline, pinning, users,
                            sample_waits, redis_url)


#: Where a tree's app factory lives: this tree's, then an older tree's (before app/ had rooms).
#: (The older tree's names are spelt in two parts: a rename of modules rewrites whole names.)
FACTORIES = (("app/gateway/main.py", "app.gateway.main:create_app"),
             ("app/" "main.py", "app." "main:create_app"))


def factory_of(root: Path) -> str | None:
    """The uvicorn factory of the tree at `root` (None: not a tree of this project)."""
    return next((factory for path, factory in FACTORIES if (root / path).is_file()), None)


def gateway_argv(port: int, factory: str = FACTORIES[0][1], workers: int = 1) -> list[str]:
    """The gateway under uvicorn; several workers as `scripts/serve` and the container run
    them (app.gateway.workers: a listening socket each). Its keep-alive outlasts a step: the
    load generator's pooled connections sit idle between steps, and uvicorn's 5 s default
    closes some just as the client reuses them (a reset that is the client's race, not a
    failed turn)."""
    runner = (["uvicorn", factory, "--factory"] if workers == 1
              else ["app.gateway.workers", factory, "--workers", str(workers)])
    return [sys.executable, "-m", *runner, "--host", "127.0.0.1", "--port", str(port),
            "--log-level", "warning", "--no-access-log", "--timeout-keep-alive", "120"]


def new_client() -> httpx.AsyncClient:
    """The load generator's client, on the gateway's own transport (app.upstream.transport):
    the load generator shares the machine's cores with what it measures, and httpx's own
    pool of 500 busy connections cost it about 10 ms of CPU per request more, which made it
    the slowest process of the 500-stream step."""
    return httpx.AsyncClient(timeout=120.0, transport=AiohttpTransport())


if __name__ == "__main__":
    app()
