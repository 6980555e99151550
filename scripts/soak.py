"""A soak with faults: N gateway processes on one PostgreSQL database (optionally through
PgBouncer) with Redis, M concurrent streams from K users for T seconds, answered by the demo
model paced like a model. Midway one process is SIGKILLed and another is cut off from the
database by a proxy this script owns, which goes silent (no FIN, no RST) for longer than
the processes' dead-after, then speaks again. Some clients drop mid-answer and resume on
another process; the users of the answers streaming on the cut-off process ask for a new
turn in the same thread on another process every half second while they still read the
first (as the issue's two-process test did).

At the end it checks, and prints a table:

- every answer is in a final status (no row left `streaming`);
- the stored text is what the client saw: equal when the client got the answer's last
  event (unless a sweep took the row over: then the last checkpoint, a prefix), a prefix
  when its process died under it;
- every call is billed once: `scripts/usage.py verify` agrees with the rollups;
- never two answers streaming in one thread: per thread, no answer's stream (first event to
  last, as its client saw it) overlaps another's;
- resumes on another process were served.

Exit 0 when every check holds, 1 otherwise. The gateways' logs stay in a temporary
directory (printed; SOAK_LOG_LEVEL=INFO for every turn's lines).

    python scripts/soak.py [--seconds 60] [--processes 3] [--streams 12] [--users 4]
                           [--database-url postgresql://postgres@127.0.0.1:5432/test]
                           [--redis-url redis://127.0.0.1:6379/0] [--pgbouncer HOST:PORT]
                           [--no-faults]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
from sqlalchemy import text  # noqa: E402
from sqlalchemy.engine import URL, make_url  # noqa: E402
from sqlalchemy.ext.asyncio import create_async_engine  # noqa: E402
from sqlalchemy.pool import NullPool  # noqa: E402

from app.keys import repository as api_keys  # noqa: E402
from app.store.db import Database  # noqa: E402
from app.store.migrations import upgrade_to_head  # noqa: E402

HEARTBEAT_S, DEAD_AFTER_S = 0.5, 4.0
#: Share of turns whose client drops mid-answer and resumes on another process.
RESUME_SHARE = 0.15
START_TIMEOUT_S = 60.0
SETTLE_TIMEOUT_S = 60.0


# -- the proxy ------------------------------------------------------------------------------

class SilentProxy:
    """TCP in front of the database; `silence()` forwards nothing either way and closes
    nothing (a partition), `speak()` forwards again what was held."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target, self.port = target, 0
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, asyncio.CancelledError):
            while data := await reader.read(65536):
                await self._flowing.wait()
                writer.write(data)
                await writer.drain()
        with contextlib.suppress(asyncio.CancelledError):
            await self._flowing.wait()
        writer.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await self._flowing.wait()
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))

    def silence(self) -> None:
        self._flowing.clear()

    def speak(self) -> None:
        self._flowing.set()

    async def close(self) -> None:
        self.speak()
        if self._server is not None:
            self._server.close()


# -- processes ------------------------------------------------------------------------------

def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def wait_up(url: str, process: subprocess.Popen[bytes]) -> None:
    """Until `url` answers 200 (the loop keeps running: the proxy lives in it)."""
    deadline = time.monotonic() + START_TIMEOUT_S
    async with httpx.AsyncClient(timeout=1.0) as client:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise SystemExit(f"soak: {url} exited with {process.returncode}")
            with contextlib.suppress(httpx.HTTPError):
                if (await client.get(url)).status_code == 200:
                    return
            await asyncio.sleep(0.1)
    raise SystemExit(f"soak: {url} not up after {START_TIMEOUT_S} s")


@dataclass
class Gateway:
    index: int
    url: str
    process: subprocess.Popen[bytes]
    log: Path
    alive: bool = True
    partitioned: bool = False


def start_gateway(index: int, database_url: str, env: dict[str, str], logs: Path) -> Gateway:
    port = free_port()
    log = logs / f"gateway-{index}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "app.gateway.main:create_app", "--factory",
             "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning",
             "--timeout-graceful-shutdown", "5"],
            cwd=ROOT, env={**env, "CHATGATE_DATABASE_URL": database_url},
            stdout=out, stderr=subprocess.STDOUT)
    return Gateway(index, f"http://127.0.0.1:{port}", process, log)


async def admin(server: URL, statement: str) -> None:
    engine = create_async_engine(server.set(drivername="postgresql+asyncpg",
                                            database="postgres"),
                                 poolclass=NullPool, isolation_level="AUTOCOMMIT")
    try:
        async with engine.connect() as connection:
            await connection.execute(text(statement))
    finally:
        await engine.dispose()


# -- clients --------------------------------------------------------------------------------

@dataclass
class Answer:
    thread_id: str
    gateway: int
    message_id: str | None = None
    seen: str = ""
    last_id: int = 0
    started: float | None = None
    ended: float | None = None
    end: dict[str, Any] | None = None  # the message_end's data; None: cut
    error: str | None = None
    resumed_on: int | None = None
    resume_served: bool = False
    #: Its client left on purpose mid-answer (to resume elsewhere).
    left: bool = False


async def events(response: httpx.Response) -> AsyncIterator[tuple[str, int | None, Any]]:
    """(event, id, data) of an SSE response."""
    name, ident, data = "message", None, ""
    async for line in response.aiter_lines():
        if line == "":
            if data:
                yield name, ident, json.loads(data)
            name, ident, data = "message", None, ""
        elif line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("id:"):
            ident = int(line[3:].strip())
        elif line.startswith("data:"):
            data += line[5:].strip()


async def read_answer(answer: Answer, response: httpx.Response, *,
                      leave_after: int | None = None) -> bool:
    """The answer's events into `answer`; True when the client left on purpose."""
    deltas = 0
    async for name, ident, data in events(response):
        now = time.monotonic()
        answer.started = answer.started or now
        answer.ended = now
        if name == "message_start":
            answer.message_id = data["assistant_message_id"]
        elif name == "delta":
            answer.seen += data["text"]
            answer.last_id = ident or answer.last_id
            deltas += 1
            if leave_after is not None and deltas >= leave_after:
                return True
        elif name == "message_end":
            answer.end = data
        elif name == "error":
            answer.error = data.get("code")
    return False


@dataclass
class Soak:
    gateways: list[Gateway]
    keys: list[str]
    deadline: float
    answers: list[Answer] = field(default_factory=list)
    refused: Counter[str] = field(default_factory=Counter)
    resumes_tried: int = 0
    impatient_served: int = 0
    #: Answers being read now, with their client.
    live: dict[int, tuple[Answer, httpx.AsyncClient]] = field(default_factory=dict)

    def others(self, index: int) -> list[Gateway]:
        return [g for g in self.gateways if g.alive and g.index != index]

    def pick(self, n: int) -> Gateway:
        alive = [g for g in self.gateways if g.alive]
        return alive[n % len(alive)]

    async def worker(self, w: int) -> None:
        key = self.keys[w % len(self.keys)]
        headers = {"Authorization": f"Bearer {key}"}
        async with httpx.AsyncClient(headers=headers, timeout=60.0) as client:
            thread_id: str | None = None
            n = w
            while time.monotonic() < self.deadline:
                n += 1
                gateway = self.pick(n)
                try:
                    if thread_id is None or n % 5 == 0:
                        made = await client.post(f"{gateway.url}/api/threads", json={})
                        if made.status_code != 201:
                            self.refused[f"thread {made.status_code}"] += 1
                            await asyncio.sleep(0.2)
                            continue
                        thread_id = made.json()["id"]
                    await self.turn(client, gateway, thread_id, resume=random.random()
                                    < RESUME_SHARE)
                except httpx.HTTPError as error:
                    self.refused[type(error).__name__] += 1
                    await asyncio.sleep(0.2)

    async def turn(self, client: httpx.AsyncClient, gateway: Gateway, thread_id: str, *,
                   resume: bool) -> None:
        answer = Answer(thread_id, gateway.index)
        async with client.stream("POST", f"{gateway.url}/api/threads/{thread_id}/messages",
                                 json={"content": "Hello, tell me something"}) as response:
            if response.status_code != 200:
                await response.aread()
                self.refused[str(response.status_code)] += 1
                await asyncio.sleep(0.2)
                return
            self.answers.append(answer)
            self.live[id(answer)] = (answer, client)
            try:
                left = await read_answer(answer, response, leave_after=10 if resume else None)
            except httpx.HTTPError:  # its process died under it
                return
            finally:
                self.live.pop(id(answer), None)
        if left and answer.message_id is not None:
            answer.left = True
            await self.resume(client, answer)

    async def impatient(self, answer: Answer, client: httpx.AsyncClient) -> None:
        """The answer's thread asked for a new turn on another process every 0.5 s, as a
        user whose answer stalled would, until one is let in (409 `thread_busy` before):
        the turn that then streams must not overlap the answer in the thread."""
        deadline = time.monotonic() + 3 * DEAD_AFTER_S
        async with httpx.AsyncClient(headers=dict(client.headers), timeout=60.0) as own:
            await self._impatient(answer, own, deadline)

    async def _impatient(self, answer: Answer, client: httpx.AsyncClient, deadline: float
                         ) -> None:
        while time.monotonic() < deadline:
            others = [g for g in self.others(answer.gateway) if not g.partitioned]
            if not others:
                return
            second = Answer(answer.thread_id, others[0].index)
            with contextlib.suppress(httpx.HTTPError):
                async with client.stream(
                        "POST", f"{others[0].url}/api/threads/{answer.thread_id}/messages",
                        json={"content": "are you still there?"}) as response:
                    if response.status_code == 200:
                        self.answers.append(second)
                        self.impatient_served += 1
                        await read_answer(second, response)
                        return
                    await response.aread()
            await asyncio.sleep(0.5)

    async def resume(self, client: httpx.AsyncClient, answer: Answer) -> None:
        others = [g for g in self.others(answer.gateway) if not g.partitioned]
        if not others:
            return
        self.resumes_tried += 1
        other = others[0]
        answer.resumed_on = other.index
        path = f"/api/threads/{answer.thread_id}/messages/{answer.message_id}/stream"
        with contextlib.suppress(httpx.HTTPError):
            async with client.stream("GET", other.url + path,
                                     headers={"Last-Event-ID": str(answer.last_id)}) as response:
                if response.status_code == 200:
                    await read_answer(answer, response)
                    answer.resume_served = answer.end is not None
                else:
                    await response.aread()


# -- the run --------------------------------------------------------------------------------

async def faults(soak: Soak, proxy: SilentProxy, at: float) -> None:
    """SIGKILL the first process, cut the second off the database past dead-after."""
    await asyncio.sleep(at)
    killed = soak.gateways[0]
    killed.alive = False
    killed.process.send_signal(signal.SIGKILL)
    print(f"soak: +{at:.0f} s SIGKILL gateway 0, database silent for gateway 1", flush=True)
    soak.gateways[1].partitioned = True
    proxy.silence()
    users = [asyncio.ensure_future(soak.impatient(answer, client))
             for answer, client in list(soak.live.values()) if answer.gateway == 1]
    await asyncio.sleep(DEAD_AFTER_S + 3)
    proxy.speak()
    soak.gateways[1].partitioned = False
    print("soak: gateway 1 reaches the database again", flush=True)
    await asyncio.gather(*users)


async def rows(url: str) -> dict[str, tuple[str, str, dict[str, Any]]]:
    db = Database(url)
    try:
        async with db.transaction() as session:
            result = await session.execute(text(
                "SELECT id, status, content, metadata FROM messages WHERE role = 'assistant'"))
            return {str(r[0]): (r[1], r[2], r[3]) for r in result.all()}
    finally:
        await db.dispose()


async def settled(url: str) -> int:
    """Rows still `streaming` once every process has had time to finish or sweep."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while True:
        streaming = sum(1 for status, _, _ in (await rows(url)).values()
                        if status == "streaming")
        if not streaming or time.monotonic() > deadline:
            return streaming
        await asyncio.sleep(0.5)


def overlaps(answers: list[Answer]) -> int:
    """Answers of one thread whose stream, as its client saw it, began before an earlier
    one's ended (each printed)."""
    by_thread: dict[str, list[Answer]] = defaultdict(list)
    for answer in answers:
        if answer.started is not None and answer.ended is not None:
            by_thread[answer.thread_id].append(answer)
    count = 0
    for group in by_thread.values():
        group.sort(key=lambda a: a.started or 0.0)
        latest: Answer | None = None
        for answer in group:
            if latest is not None and (answer.started or 0.0) < (latest.ended or 0.0):
                count += 1
                print(f"soak: overlap in thread {answer.thread_id}: {describe(latest)} "
                      f"still streaming when {describe(answer)} began", flush=True)
            if latest is None or (answer.ended or 0.0) > (latest.ended or 0.0):
                latest = answer
    return count


def describe(answer: Answer) -> str:
    end = answer.end or {"status": "cut"}
    return (f"[{answer.message_id} on gateway {answer.gateway}, {answer.started:.2f}-"
            f"{answer.ended:.2f}, {end.get('status')} {end.get('reason') or ''}, resumed on "
            f"{answer.resumed_on}]")


def text_check(answers: list[Answer], stored: dict[str, tuple[str, str, dict[str, Any]]]
               ) -> Counter[str]:
    outcome: Counter[str] = Counter()
    for answer in answers:
        if answer.message_id is None:  # cut before its first event: nothing seen
            outcome["nothing seen"] += 1
            continue
        if answer.message_id not in stored:
            outcome["MISSING"] += 1
            continue
        _, content, meta = stored[answer.message_id]
        swept = meta.get("interrupted_reason") in ("process_died",)
        if answer.left and not answer.resume_served:  # the answer went on without it
            outcome["continues what was seen" if content.startswith(answer.seen)
                    or answer.seen.startswith(content) else "NOT A PREFIX"] += 1
        elif answer.end is not None and not swept:
            outcome["equal" if content == answer.seen else "DIFFERENT"] += 1
        else:
            prefix = answer.seen.startswith(content)
            outcome["prefix" if prefix else "NOT A PREFIX"] += 1
            if not prefix:
                print(f"soak: stored text of {describe(answer)} ({meta.get('interrupted_reason')}"
                      f", {len(content)} characters) is not a prefix of the {len(answer.seen)} "
                      "its client saw", flush=True)
    return outcome


async def run(args: argparse.Namespace) -> int:
    server = make_url(args.database_url)
    name = f"cg_soak_{uuid.uuid4().hex[:10]}"
    await admin(server, f'CREATE DATABASE "{name}"')
    direct = server.set(drivername="postgresql+asyncpg", database=name)
    logs = Path(os.environ.get("TMPDIR", "/tmp")) / f"chatgate-{name}"
    logs.mkdir(parents=True, exist_ok=True)
    gateways: list[Gateway] = []
    demo: subprocess.Popen[bytes] | None = None
    proxy = SilentProxy((direct.host or "127.0.0.1", direct.port or 5432))
    try:
        direct_url = direct.render_as_string(hide_password=False)
        await upgrade_to_head(direct_url)
        db = Database(direct_url)
        keys = []
        async with db.transaction() as session:
            for k in range(args.users):
                keys.append((await api_keys.create_key(session, f"soak-{k}", "soak"))[1])
        await db.dispose()
        await proxy.start()
        demo_port = free_port()
        demo = subprocess.Popen(
            [sys.executable, "-m", "app.demo_llm", "--port", str(demo_port), "--delay-ms",
             str(args.delay_ms), "--log-level", "warning"], cwd=ROOT)
        await wait_up(f"http://127.0.0.1:{demo_port}/healthz", demo)
        env = {k: v for k, v in os.environ.items() if not k.startswith("CHATGATE_")}
        env |= {"CHATGATE_UPSTREAM_BASE_URL": f"http://127.0.0.1:{demo_port}/v1",
                "CHATGATE_REDIS_URL": args.redis_url, "CHATGATE_REDIS_PREFIX": name,
                "CHATGATE_AUTH_MODE": "keys", "CHATGATE_HEARTBEAT_S": str(HEARTBEAT_S),
                "CHATGATE_PROCESS_DEAD_AFTER_S": str(DEAD_AFTER_S),
                "CHATGATE_CHECKPOINT_INTERVAL_S": "0.5",
                "CHATGATE_DATABASE_CONNECT_TIMEOUT_S": "2",
                "CHATGATE_DATABASE_STATEMENT_TIMEOUT_S": "2",
                "CHATGATE_DATABASE_POOL_TIMEOUT_S": "4", "CHATGATE_TITLE_CALLS": "false",
                "CHATGATE_SUMMARY_CALLS": "false", "CHATGATE_RESUME_GRACE_S": "10",
                "CHATGATE_RATE_LIMIT_PER_MINUTE": "0", "CHATGATE_MAX_STREAMS_PER_USER": "0",
                "CHATGATE_FIRST_TOKEN_TIMEOUT_S": "20", "CHATGATE_LOG_FORMAT": "json",
                "CHATGATE_LOG_LEVEL": os.environ.get("SOAK_LOG_LEVEL", "WARNING"),
                "PYTHONUNBUFFERED": "1"}
        for index in range(args.processes):
            url = direct
            if args.pgbouncer:
                host, _, port = args.pgbouncer.partition(":")
                url = direct.set(host=host, port=int(port or 6432))
                env |= {"CHATGATE_DATABASE_POOLER": "pgbouncer",
                        "CHATGATE_DATABASE_LISTEN_URL": direct_url}
            if index == 1 and not args.no_faults:
                url = url.set(host="127.0.0.1", port=proxy.port) if not args.pgbouncer \
                    else url  # behind PgBouncer the partition is the listener's alone
            gateways.append(start_gateway(index, url.render_as_string(hide_password=False),
                                          env, logs))
        for gateway in gateways:
            await wait_up(gateway.url + "/readyz", gateway.process)
        soak = Soak(gateways, keys, time.monotonic() + args.seconds)
        print(f"soak: {args.processes} processes, {args.streams} streams, {args.users} users, "
              f"{args.seconds} s (logs in {logs})", flush=True)
        tasks = [asyncio.ensure_future(soak.worker(w)) for w in range(args.streams)]
        if not args.no_faults and args.processes >= 3:
            tasks.append(asyncio.ensure_future(faults(soak, proxy, args.seconds / 2)))
        await asyncio.gather(*tasks)
        left_streaming = await settled(direct_url)
        stored = await rows(direct_url)
        verify = subprocess.run([sys.executable, str(ROOT / "scripts" / "usage.py"), "verify",
                                 "--database-url", direct_url], cwd=ROOT, capture_output=True,
                                text=True, timeout=120)
        return report(soak, stored, left_streaming, verify)
    finally:
        for gateway in gateways:
            if gateway.process.poll() is None:
                gateway.process.terminate()
        for gateway in gateways:
            with contextlib.suppress(subprocess.TimeoutExpired):
                gateway.process.wait(timeout=15)
        if demo is not None:
            demo.terminate()
        await proxy.close()
        await admin(server, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def report(soak: Soak, stored: dict[str, tuple[str, str, dict[str, Any]]], left: int,
           verify: subprocess.CompletedProcess[str]) -> int:
    outcomes: Counter[str] = Counter()
    for answer in soak.answers:
        if answer.end is None and answer.error is not None:
            outcomes[f"error {answer.error}"] += 1
        elif answer.end is None:
            outcomes["cut (no last event)"] += 1
        else:
            outcomes[f"{answer.end['status']} {answer.end.get('reason', '')}".strip()] += 1
    texts = text_check(soak.answers, stored)
    crossed = overlaps(soak.answers)
    served = sum(answer.resume_served for answer in soak.answers)
    checks = {
        "every answer in a final status": left == 0,
        "stored text is what the client saw": not (texts["DIFFERENT"] or texts["MISSING"]
                                                   or texts["NOT A PREFIX"]),
        "every call billed once (usage.py verify)": verify.returncode == 0,
        "never two answers streaming in one thread": crossed == 0,
        "resumes on another process served": soak.resumes_tried == 0 or served > 0,
    }
    print(f"\n{'answers':<44} {len(soak.answers)}")
    for outcome, count in sorted(outcomes.items()):
        print(f"  {outcome:<42} {count}")
    print(f"{'refused or failed requests':<44} {sum(soak.refused.values())} "
          f"{dict(soak.refused)}")
    print(f"{'rows left streaming':<44} {left}")
    print(f"{'stored text vs seen':<44} {dict(texts)}")
    print(f"{'overlapping answers in a thread':<44} {crossed}")
    print(f"{'resumes tried / served':<44} {soak.resumes_tried} / {served}")
    print(f"{'impatient turns let in':<44} {soak.impatient_served}")
    print(f"{'usage.py verify':<44} exit {verify.returncode}")
    print()
    for check, held in checks.items():
        print(f"{'ok  ' if held else 'FAIL'} {check}")
    if verify.returncode != 0:
        print(verify.stdout[-2000:], verify.stderr[-2000:])
    return 0 if all(checks.values()) else 1


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="scripts/soak.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--streams", type=int, default=12)
    parser.add_argument("--users", type=int, default=4)
    parser.add_argument("--delay-ms", type=float, default=20.0,
                        help="the demo model's pause between pieces (a model's pace)")
    parser.add_argument("--database-url", default=os.environ.get(
        "CHATGATE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"),
        help="a PostgreSQL server whose user may create databases (one is made and dropped)")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--pgbouncer", default=None, metavar="HOST:PORT",
                        help="the processes reach the database through this PgBouncer "
                             "(transaction mode, in front of the same server)")
    parser.add_argument("--no-faults", action="store_true")
    args = parser.parse_args(argv)
    raise SystemExit(asyncio.run(run(args)))


if __name__ == "__main__":
    main()
