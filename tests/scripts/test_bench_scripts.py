"""The benchmark commands the README and docs quote run as documented and print their figures
(small sizes here; the figures themselves are never asserted: timing belongs to the scripts).

scripts/bench_gateway.py runs as a process of its own: it pins itself to cores, raises its
file limit and freezes its heap, none of which a test process should have done to it. The
others change nothing of the process they run in, and run in this one (tests/support/
scripts.py), without the second or so of CPU a process spends importing the application."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import typer
from sqlalchemy import func, select

from app.store.db import Database
from app.store.models import Thread
from scripts.bench_gateway import Pinning
from scripts.bench_upstream import serve_upstream
from tests.support import scripts
from tests.support.databases import postgres_only
from tests.support.gateway import ROOT, clean_env, free_port


def run_script(name: str, *args: str) -> str:
    """scripts/`name` as a process, on a wide terminal; its output."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / name), *args],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env=clean_env({"COLUMNS": "200"}),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def run_in_process(name: str, *args: str) -> subprocess.CompletedProcess[str]:
    """scripts/`name` as `python scripts/NAME ARGS` runs it, in this process, on a wide
    terminal."""
    return scripts.run_script(name, *args, env={"COLUMNS": "200"})


def bench_output(name: str, *args: str) -> str:
    """run_in_process's output, the run having ended with 0."""
    done = run_in_process(name, *args)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_bench_filter_prints_every_input_and_the_linearity_ratio() -> None:
    out = bench_output("bench_filter.py", "--runs", "1")
    for label in ("markdown 200 KB", "every other char '<'", "'<!-' repeated",
                  "60 KB METADATA body", "markdown 1 MB"):
        assert label in out
    assert re.search(r"1 MB \d+ ns, 250 KB \d+ ns, ratio \d+\.\d+", out), out


def test_bench_filter_compares_the_tool_formats_on_a_plain_answer() -> None:
    out = bench_output("bench_filter.py", "--tool-formats", "--runs", "1")
    for chunk in ("1 B", "4 B", "4 KB"):
        assert re.search(rf"markdown \d+ KB +│ +{chunk} .*[+-]\d+\.\d % .*[+-]\d+\.\d %", out), out


def test_bench_repair_repairs_and_restores_every_corrupt_row(database_url: str) -> None:
    out = bench_output("bench_repair.py", "--messages", "600", "--runs", "2",
                      "--database-url", database_url)
    seeded = re.search(r"seeded 600 messages, (\d+) corrupt", out)
    assert seeded is not None and int(seeded.group(1)) > 0, out
    assert f"{seeded.group(1)} rows repaired and restored" in out
    assert re.search(r"median of 2 runs: scan [\d.]+ s, fix --apply [\d.]+ s, "
                     r"rollback [\d.]+ s", out), out


def test_bench_trace_compares_with_and_without_a_trace(database_url: str) -> None:
    out = bench_output("bench_trace.py", "--chunks", "50", "--runs", "2",
                      "--database-url", database_url)
    assert re.search(r"50 chunks, 2 runs; median transaction without trace [\d.]+ ms, "
                     r"with trace [\d.]+ ms", out), out


def test_bench_history_compares_a_long_thread_with_a_fresh_one(database_url: str) -> None:
    """On PostgreSQL, whose opening is one statement; SQLite is refused in plain words."""
    args = ("--database-url", database_url, "--messages", "10", "--rounds", "1", "--turns", "2")
    if database_url.startswith("sqlite"):
        done = run_in_process("bench_history.py", *args)
        assert done.returncode == 2 and "give a PostgreSQL database" in done.stderr, done.stderr
        return
    out = bench_output("bench_history.py", *args)
    assert re.search(r"round 1: opening, fresh thread [\d.]+ ms vs 10 prior messages [\d.]+ ms "
                     r"\(added [+-][\d.]+ ms\); memory search, read transaction [\d.]+ ms vs "
                     r"one statement [\d.]+ ms", out), out


def test_bench_repair_defaults_to_a_scratch_sqlite_file() -> None:
    out = bench_output("bench_repair.py", "--messages", "200", "--runs", "1")
    assert out.splitlines()[-1].startswith("sqlite+aiosqlite: 200 messages, median of 1 runs")


def test_bench_gateway_prints_cpu_first_delta_and_rss_side_by_side() -> None:
    """With the gateway on a core of its own where the machine has two or more."""
    cores = sorted(os.sched_getaffinity(0))
    pinned = ("--gateway-cores", str(cores[0])) if len(cores) > 1 else ()
    out = run_script("bench_gateway.py", "--turns", "4", "--tokens", "5",
                     "--concurrency", "1,2", "--open-streams", "3", "--long-tokens", "10",
                     "--history", "10", "--cost-rounds", "1", "--settle-turns", "0",
                     "--workers-concurrency", "4", "--rates", "20",
                     "--max-seconds", "120", "--rss-settle-s", "0", "--users", "3", *pinned)
    if pinned:
        assert f"the gateway on cores [{cores[0]}], the load generator and the upstream on " \
               f"{cores[1:]}" in out, out
    assert re.search(r"CPU per 5-token turn \(10 concurrent\): upstream [\d.]+ ms, "
                     r"gateway [\d.]+ ms, ratio ([\d.]+x|n/a)", out), out
    rows = re.findall(r"^│\s+(\d+) │(?:\s+-?[\d.]+ │){6}\s+(\d+) │\s+(\d+) │$", out,
                      re.MULTILINE)
    # every level and rate measured, no turn failed or was refused
    assert rows == [("1", "0", "0"), ("2", "0", "0"), ("20", "0", "0")], out
    assert "time to the first delta at a fixed rate (ms)" in out and "turns/s" in out, out
    assert re.search(r"RSS per open stream: -?\d+ KB \(3 of 3 slow\s+streams open when "
                     r"measured,\s+\d+\s+gateway\s+file\s+descriptors\)", out), out
    assert re.search(r"CPU per turn, 5 vs \d+ tokens: [\d.]+ ms vs [\d.]+ ms, ratio "
                     r"([\d.]+x|n/a)", out), out
    assert re.search(r"fresh thread vs \d+ prior messages: [\d.]+ ms vs [\d.]+ ms, added", out), out
    assert re.search(r"turns per second at \d+ concurrent, 3 users: direct upstream [\d.]+, "
                     r"gateway 1 process [\d.]+, 2 workers [\d.]+ \([\d.]+x\);\s+the\s+machine's"
                     r"\s+\d+\s+"
                     r"cores\s+busy\s+meanwhile:\s+\d+%,\s+\d+%,\s+\d+%;\s+CPU\s+ms\s+per\s+"
                     r"turn:\s+[\d.]+,\s+[\d.]+,\s+[\d.]+;\s+the\s+load\s+generator's:\s+[\d.]+,"
                     r"\s+[\d.]+,\s+[\d.]+;\s+the\s+cores'\s+headroom\s+at\s+one\s+"
                     r"process's\s+cost\s+per\s+turn:\s+[\d.]+x", out), out
    assert_each_worker_share(out, workers=2, turns=4)


def assert_each_worker_share(out: str, workers: int, turns: int) -> None:
    """The workers step's line for each gateway column: every process that serves turns,
    its share of the column's turns (together all of them) and its CPU per turn."""
    flat = " ".join(out.split())
    for name, processes in (("1 process", 1), (f"{workers} workers", workers)):
        line = re.search(rf"{name}: each process's share of {turns} turns: (.*?); CPU per turn "
                         r"all together [\d.]+ ms", flat)
        assert line is not None, out
        shares = re.findall(r"pid (\d+) (\d+) turns \(\d+%\), [\d.]+ ms CPU", line.group(1))
        assert len({pid for pid, _ in shares}) == processes, line.group(0)
        assert sum(int(count) for _, count in shares) == turns, line.group(0)


@postgres_only("pg_stat_activity and pg_locks are PostgreSQL's")
def test_bench_gateway_workers_step_spreads_turns_over_users_and_samples_waits(
        database_url: str) -> None:
    """--users N: the workers step's threads belong to N users (a key each) in equal parts;
    --sample-waits prints what the database's sessions waited on in each gateway column."""
    out = run_script("bench_gateway.py", "--turns", "4", "--tokens", "5", "--concurrency", "1",
                     "--open-streams", "0", "--long-tokens", "0", "--history", "0",
                     "--workers-concurrency", "2", "--users", "2", "--sample-waits",
                     "--max-seconds", "120", "--database-url", database_url)
    assert_each_worker_share(out, workers=2, turns=4)
    flat = " ".join(out.split())
    for name in ("1 process", "2 workers"):
        assert re.search(rf"{name}: database sessions waiting, mean per sample over \d+ samples: ",
                         flat), out
    owners = asyncio.run(thread_owners(database_url))
    users = {user: count for user, count in owners.items() if user.startswith("bench-user-")}
    # each gateway's warm-up (4 turns) and its 4 measured turns, alternately the two users'
    assert sorted(users.values()) == [8, 8], owners


async def thread_owners(url: str) -> dict[str, int]:
    db = Database(url)
    try:
        async with db.transaction(read_only=True) as session:
            rows = await session.execute(
                select(Thread.user_id, func.count()).group_by(Thread.user_id))
            return {user: count for user, count in rows}
    finally:
        await db.dispose()


def test_bench_gateway_compares_another_proxy_of_the_same_upstream() -> None:
    """--compare measures any OpenAI-compatible server given (here a second bench upstream
    stands in for a proxy), CPU per turn by its pid and the first delta against the direct
    upstream, whose port --upstream-port fixes."""
    proxy_port, upstream_port = free_port(), free_port()
    proxy = subprocess.Popen([sys.executable, str(ROOT / "scripts" / "bench_upstream.py"),
                              str(proxy_port), "--tokens", "5"], cwd=ROOT, env=clean_env({}))
    try:
        out = run_script("bench_gateway.py", "--turns", "4", "--tokens", "5", "--concurrency",
                         "1,2", "--open-streams", "1", "--long-tokens", "0", "--history", "0",
                         "--workers", "0", "--max-seconds", "120", "--rss-settle-s", "0",
                         "--upstream-port", str(upstream_port),
                         "--compare", f"http://127.0.0.1:{proxy_port}/v1",
                         "--compare-pid", str(proxy.pid))
    finally:
        proxy.terminate()
        proxy.wait(timeout=10)
    assert re.search(rf"compare http://127.0.0.1:{proxy_port}/v1: CPU per turn \(10 concurrent\) "
                     r"[\d.]+ ms", out), out
    rows = re.findall(r"^│\s+(\d+) │(?:\s+-?[\d.]+ │){6}\s+(\d+) │\s+(\d+) │$", out,
                      re.MULTILINE)
    assert rows[-2:] == [("1", "0", "0"), ("2", "0", "0")], out


def test_bench_gateway_measures_a_baseline_tree_beside_this_one() -> None:
    """--baseline-root (here this very tree) starts that tree's gateway on its own database
    and prints its CPU per turn and added first delta beside the gateway's."""
    out = run_script("bench_gateway.py", "--turns", "4", "--tokens", "5", "--concurrency",
                     "1,2", "--open-streams", "0", "--long-tokens", "0", "--history", "0",
                     "--workers", "0", "--max-seconds", "120", "--baseline-root", str(ROOT))
    assert re.search(r"^baseline \w+\+?: CPU per turn \(10 concurrent\) [\d.]+ ms", out,
                     re.MULTILINE), out
    assert "side by side, interleaved" in out, out
    rows = re.findall(r"^│\s+(gateway|baseline) \w+\+?\s+│\s+[\d.]+ │(?:\s+[+-][\d.]+ / "
                      r"[+-][\d.]+ │){2}\s+(\d+) │$", out, re.MULTILINE)
    assert rows == [("gateway", "0"), ("baseline", "0")], out


async def test_the_paced_upstream_sends_each_token_on_its_own_pace_apart() -> None:
    """As a model streams: every token its own read for the client, the pace between them."""
    port, pace_s, tokens = free_port(), 0.03, 4
    server = asyncio.create_task(serve_upstream(port, tokens, pace_s))
    try:
        for _ in range(100):
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                break
            except OSError:
                await asyncio.sleep(0.01)
        body = json.dumps({"model": "bench-1", "stream": True, "messages": []}).encode()
        writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nhost: bench\r\n"
                     b"content-length: %d\r\n\r\n%s" % (len(body), body))
        reads: list[tuple[float, bytes]] = []
        while not reads or b"[DONE]" not in reads[-1][1]:
            block = await asyncio.wait_for(reader.read(65536), 10)
            assert block, reads
            reads.append((time.monotonic(), block))
        writer.close()
    finally:
        server.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await server
    with_tokens = [(at, block.count(b'"content":"w')) for at, block in reads
                   if b'"content":"w' in block]
    assert [count for _, count in with_tokens] == [1] * tokens, reads
    assert with_tokens[-1][0] - with_tokens[0][0] >= (tokens - 1) * pace_s * 0.9


@pytest.mark.parametrize(("spec", "said"), [
    ("0,1", "leave a core to the load generator and the upstream"),
    ("7", "this process may run on cores [0, 1]"),
    ("", "this process may run on cores [0, 1]"),
    ("first", "core numbers, e.g. 0 or 0,1: not 'first'"),
])
def test_gateway_cores_must_leave_the_others_a_core_of_this_machine(spec: str, said: str
                                                                   ) -> None:
    with pytest.raises(typer.BadParameter, match=re.escape(said)):
        Pinning.parse(spec, {0, 1})


def test_a_pinned_gateway_runs_each_of_its_threads_on_its_cores_only() -> None:
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        pytest.skip("one core: nothing to split")
    pinning = Pinning.parse(str(cores[0]), set(cores))
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys, threading; threading.Thread(target=sys.stdin.read)"
         ".start(); print('started', flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "started\n"
        pinning.apply_to(child.pid)
        threads = [int(t.name) for t in Path(f"/proc/{child.pid}/task").iterdir()]
        assert len(threads) == 2
        assert all(os.sched_getaffinity(thread) == {cores[0]} for thread in threads)
    finally:
        child.kill()
        child.wait()
