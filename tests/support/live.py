"""Live servers for end-to-end tests: the demo model server and the gateway, talked to over
HTTP, in process by default (tests/support/inprocess.py), as subprocesses where the process
itself is under test.

Fixtures (registered for every test directory by the root conftest.py)
    demo_llm        session-wide DemoLlm, no pause between deltas ([slow-first] waits 1.5 s)
    slow_demo_llm   session-wide DemoLlm, 10 ms a delta ([long] then streams for ~10 s):
                    for disconnect and crash tests
    start_gateway   factory: start_gateway(backend, *, upstream=..., env=..., database_url=...)
                    -> InProcessGateway; a fresh migrated database per gateway unless
                    database_url is given (restart on the same database); every gateway is
                    stopped and its database dropped after the test
    start_gateway_process
                    the same factory for a gateway PROCESS (GatewayProcess, kill9()): for what
                    only a process shows (a crash, two processes on one database); forked from
                    a server that has the gateway imported (tests/support/gateway_fork.py)
    start_gateway_processes
                    start_gateway_processes(backend, count, ...): several at once, one database
    live_backend    "sqlite" | "postgresql", parametrised per MODULE (PostgreSQL skips loudly
                    when unreachable, fails with CHATGATE_REQUIRE_POSTGRES=1)
    own_database_url
                    a fresh database on live_backend for a test that breaks it (an outage)
    gateway         module-wide InProcessGateway on live_backend against demo_llm,
                    auth_mode=keys, short timeouts; tests make their own threads and keys
                    (gateway.api_key)

Plain helpers
    free_port(), start_demo_llm(delay_ms, slow_first_s), wait_for_http(url, process)
    parse_sse(text) -> list[SseEvent];  await post_turn(client, thread_id, content) -> TurnResult
    LiveGateway (both kinds): url, database_url, logs(), log_text(), stop(),
                 client(api_key=None) -> httpx.AsyncClient, await api_key(user, admin=False)
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource
from starlette.applications import Starlette

from app.demo_llm import DemoSettings, create_demo_app
from app.followups.worker import FollowupWorker
from app.services.runtime import Runtime
from app.store import api_keys
from app.store.db import Database
from tests.support.databases import drop_database, make_fresh_database_url, require_postgres
from tests.support.gateway_fork import ProcessHandle, fork_gateway, spawn_needed
from tests.support.inprocess import (
    InProcessServer,
    LogSink,
    LoopAsgiTransport,
    build_gateway_app,
    close_server_loop,
    settings_from_env,
)

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 30.0

#: Gateway settings for tests: short timeouts so failure paths are quick.
TEST_GATEWAY_ENV: Mapping[str, str] = {
    "CHATGATE_AUTH_MODE": "keys",
    "CHATGATE_FIRST_TOKEN_TIMEOUT_S": "1.0",
    "CHATGATE_UPSTREAM_READ_TIMEOUT_S": "5.0",
    "CHATGATE_UPSTREAM_CONNECT_TIMEOUT_S": "2.0",
    "CHATGATE_UPSTREAM_MAX_RETRIES": "0",
    "CHATGATE_KEEPALIVE_S": "1.0",
    "CHATGATE_LOG_LEVEL": "INFO",
    # A client that leaves ends its turn at once, as before resumable streams: the tests
    # of resuming set their own grace.
    "CHATGATE_RESUME_GRACE_S": "0",
}


def free_port() -> int:
    """A port the OS reports free on 127.0.0.1."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _clean_env(extra: Mapping[str, str]) -> dict[str, str]:
    """The test process's environment without CHATGATE_ settings, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHATGATE_")}
    env.update(extra)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def wait_for_http(url: str, process: ProcessHandle, log_path: Path) -> None:
    """Poll url until 200; fail with the process's log if it dies or takes too long."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(
                f"{url}: process exited with {process.returncode}\n{log_path.read_text()[-4000:]}"
            )
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=1.0).status_code == 200:
                return
        time.sleep(0.05)
    raise RuntimeError(f"{url} not up after {START_TIMEOUT_S} s\n{log_path.read_text()[-4000:]}")


def _stop(process: ProcessHandle) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


# -- the demo model server ----------------------------------------------------------------


class _ExplicitDemoSettings(DemoSettings):
    """Demo settings made only of the values given (no CHATGATE_DEMO_ variables, no .env)."""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings,)


class DemoLlm:
    """A running demo model server (in process, on a real loopback port: gateway
    subprocesses reach it too)."""

    def __init__(self, server: InProcessServer) -> None:
        self.server = server
        self.url = server.url

    @property
    def base_url(self) -> str:
        """What the gateway's CHATGATE_UPSTREAM_BASE_URL should be."""
        return self.url + "/v1"

    def stats(self) -> dict[str, int]:
        data: dict[str, int] = httpx.get(self.url + "/v1/_debug/stats", timeout=5).json()
        return data

    def requests(self, limit: int = 20) -> list[dict[str, Any]]:
        data = httpx.get(self.url + f"/v1/_debug/requests?limit={limit}", timeout=5).json()
        requests: list[dict[str, Any]] = data["requests"]
        return requests

    def stop(self) -> None:
        self.server.stop()


def start_demo_llm(delay_ms: float, slow_first_s: float) -> DemoLlm:
    """The demo model server at this pace, served in process until stop()."""
    app = create_demo_app(_ExplicitDemoSettings(delay_ms=delay_ms, slow_first_s=slow_first_s))
    return DemoLlm(InProcessServer(app, LogSink(), lifespan="off"))


# -- gateways -----------------------------------------------------------------------------


class LiveGateway:
    """A running gateway and the database it owns: what every kind offers tests."""

    def __init__(self, url: str, database_url: str, env: Mapping[str, str]) -> None:
        self.url = url
        self.database_url = database_url
        self.env = dict(env)

    def client(self, api_key: str | None = None, timeout: float = 30.0, *,
               over_http: bool = True) -> httpx.AsyncClient:
        """A client over real HTTP (the only way into a process)."""
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        return httpx.AsyncClient(base_url=self.url, headers=headers, timeout=timeout)

    async def api_key(self, user: str, *, admin: bool = False) -> str:
        """A new API key for `user`, made directly in the gateway's database."""
        db = Database(self.database_url)
        try:
            async with db.transaction() as session:
                _, plaintext = await api_keys.create_key(session, user, "test", is_admin=admin)
        finally:
            await db.dispose()
        return plaintext

    def log_text(self) -> str:
        raise NotImplementedError

    def logs(self) -> list[dict[str, Any]]:
        """The gateway's JSON log lines so far (non-JSON lines skipped)."""
        lines: list[dict[str, Any]] = []
        for line in self.log_text().splitlines():
            with contextlib.suppress(ValueError):
                item = json.loads(line)
                if isinstance(item, dict):
                    lines.append(item)
        return lines

    def stop(self) -> None:
        raise NotImplementedError


class InProcessGateway(LiveGateway):
    """`create_app(Settings(...))` served in this process (tests/support/inprocess.py).

    `client()` talks to the app in memory (httpx.ASGITransport: each response arrives whole);
    `client(over_http=True)`, or any client on `url`, goes through the loopback socket, for a
    test that reads a stream as it arrives, leaves mid-stream or needs the connection itself."""

    def __init__(self, server: InProcessServer, app: Starlette, database_url: str,
                 env: Mapping[str, str]) -> None:
        super().__init__(server.url, database_url, env)
        self.server = server
        self.app = app

    @property
    def runtime(self) -> Runtime:
        """The running app's database, upstream client and settings."""
        runtime: Runtime = self.app.state.runtime
        return runtime

    @property
    def worker(self) -> FollowupWorker:
        """The app's follow-up worker; tests give it a clock they move by hand."""
        worker: FollowupWorker = self.app.state.autonomy.worker
        return worker

    def client(self, api_key: str | None = None, timeout: float = 30.0, *,
               over_http: bool = False) -> httpx.AsyncClient:
        if over_http:
            return super().client(api_key, timeout)
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        return httpx.AsyncClient(transport=LoopAsgiTransport(self.app, self.server.sink),
                                 base_url="http://gateway", headers=headers, timeout=timeout)

    async def api_key(self, user: str, *, admin: bool = False) -> str:
        """A new API key for `user`, made through the gateway's own connection pool."""

        async def create() -> str:
            async with self.runtime.db.transaction() as session:
                _, plaintext = await api_keys.create_key(session, user, "test", is_admin=admin)
            return plaintext

        return await self.server.loop.arun(create())

    def log_text(self) -> str:
        return self.server.sink.text()

    def stop(self) -> None:
        self.server.stop()


class GatewayProcess(LiveGateway):
    """A gateway SUBPROCESS under uvicorn (the way it runs in production)."""

    def __init__(self, url: str, database_url: str, env: Mapping[str, str], log_path: Path,
                 process: ProcessHandle) -> None:
        super().__init__(url, database_url, env)
        self.log_path = log_path
        self.process = process

    def log_text(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def kill9(self) -> None:
        """Crash the gateway: SIGKILL, no shutdown code runs."""
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)

    def stop(self) -> None:
        _stop(self.process)


def _gateway_env(database_url: str, env: Mapping[str, str]) -> dict[str, str]:
    return {**TEST_GATEWAY_ENV, **env, "CHATGATE_DATABASE_URL": database_url}


def _start_in_process(database_url: str, env: Mapping[str, str]) -> InProcessGateway:
    full_env = _gateway_env(database_url, env)
    app = build_gateway_app(settings_from_env(full_env))
    return InProcessGateway(InProcessServer(app, LogSink()), app, database_url, full_env)


def _spawn_gateway(database_url: str, env: Mapping[str, str], log_dir: Path) -> GatewayProcess:
    """A gateway process, started but not yet answering: forked from the server that has the
    gateway imported (tests/support/gateway_fork.py), or spawned when a setting it is given
    is read at import time."""
    port = free_port()
    log_path = log_dir / f"gateway_{port}.log"
    full_env = _gateway_env(database_url, env)
    process: ProcessHandle
    if spawn_needed(full_env):
        with log_path.open("wb") as log_file:
            process = subprocess.Popen(
                [sys.executable, "-m", "uvicorn", "app.main:create_app", "--factory",
                 "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning",
                 "--timeout-graceful-shutdown", "5"],
                cwd=ROOT, env=_clean_env(full_env), stdout=log_file, stderr=subprocess.STDOUT,
            )
    else:
        process = fork_gateway(port, _clean_env(full_env), log_path, ROOT)
    return GatewayProcess(f"http://127.0.0.1:{port}", database_url, full_env, log_path,
                          process)


def _wait_until_up(gateways: list[GatewayProcess]) -> None:
    """Return once every gateway answers /healthz; stop them all if one does not."""
    try:
        for gateway in gateways:
            wait_for_http(gateway.url + "/healthz", gateway.process, gateway.log_path)
    except Exception:
        for gateway in gateways:
            gateway.stop()
        raise


StartGateway = Callable[..., InProcessGateway]
StartGatewayProcess = Callable[..., GatewayProcess]
StartGatewayProcesses = Callable[..., list[GatewayProcess]]


class _GatewayPool:
    """Starts gateways and, at teardown, stops them and drops the databases it made."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.gateways: list[LiveGateway] = []
        self.databases: list[str] = []

    def _prepare(self, backend: str, upstream: DemoLlm | str | None,
                 env: Mapping[str, str] | None, database_url: str | None
                 ) -> tuple[str, dict[str, str]]:
        if database_url is None:
            database_url = make_fresh_database_url(backend)
            self.databases.append(database_url)
        extra = dict(env or {})
        if isinstance(upstream, DemoLlm):
            extra.setdefault("CHATGATE_UPSTREAM_BASE_URL", upstream.base_url)
        elif isinstance(upstream, str):
            extra.setdefault("CHATGATE_UPSTREAM_BASE_URL", upstream)
        return database_url, extra

    def start(
        self,
        backend: str,
        *,
        upstream: DemoLlm | str | None = None,
        env: Mapping[str, str] | None = None,
        database_url: str | None = None,
    ) -> InProcessGateway:
        """An in-process gateway."""
        url, extra = self._prepare(backend, upstream, env, database_url)
        gateway = _start_in_process(url, extra)
        self.gateways.append(gateway)
        return gateway

    def start_process(
        self,
        backend: str,
        *,
        upstream: DemoLlm | str | None = None,
        env: Mapping[str, str] | None = None,
        database_url: str | None = None,
    ) -> GatewayProcess:
        """A gateway subprocess."""
        return self.start_processes(backend, 1, upstream=upstream, env=env,
                                    database_url=database_url)[0]

    def start_processes(
        self,
        backend: str,
        count: int,
        *,
        upstream: DemoLlm | str | None = None,
        env: Mapping[str, str] | None = None,
        database_url: str | None = None,
    ) -> list[GatewayProcess]:
        """`count` gateway subprocesses on one database, started side by side (each takes
        seconds to import and start; they need not wait for each other)."""
        url, extra = self._prepare(backend, upstream, env, database_url)
        gateways = [_spawn_gateway(url, extra, self.log_dir) for _ in range(count)]
        self.gateways.extend(gateways)
        _wait_until_up(gateways)
        return gateways

    def close(self) -> None:
        for gateway in self.gateways:
            gateway.stop()
        for url in self.databases:
            with contextlib.suppress(Exception):
                drop_database(url)


@pytest.fixture(scope="session")
def live_log_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="cg_live_"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def demo_llm() -> Iterator[DemoLlm]:
    """The demo model at full speed: each delta is still its own frame (the server yields
    between them), but a 1 ms pause per delta cost the suite tens of seconds. Tests that need
    an answer to take time (to leave mid-stream, to crash during it) use slow_demo_llm.
    [slow-first] holds the first token back 1.5 s: past the 1 s and 0.5 s first-token
    timeouts tests set, with room for pings every 0.3 s before it."""
    demo = start_demo_llm(delay_ms=0, slow_first_s=1.5)
    yield demo
    demo.stop()


@pytest.fixture(scope="session")
def slow_demo_llm() -> Iterator[DemoLlm]:
    """10 ms a delta: a [long] answer streams for seconds."""
    demo = start_demo_llm(delay_ms=10, slow_first_s=2.0)
    yield demo
    demo.stop()


@pytest.fixture
def start_gateway(live_log_dir: Path) -> Iterator[StartGateway]:
    pool = _GatewayPool(live_log_dir)
    yield pool.start
    pool.close()


@pytest.fixture
def start_gateway_process(live_log_dir: Path) -> Iterator[StartGatewayProcess]:
    pool = _GatewayPool(live_log_dir)
    yield pool.start_process
    pool.close()


@pytest.fixture
def start_gateway_processes(live_log_dir: Path) -> Iterator[StartGatewayProcesses]:
    """start_gateway_processes(backend, count, *, upstream=..., env=...) -> [GatewayProcess]:
    several processes on one fresh database."""
    pool = _GatewayPool(live_log_dir)
    yield pool.start_processes
    pool.close()


@pytest.fixture(
    scope="module",
    params=[pytest.param("sqlite"), pytest.param("postgresql", marks=pytest.mark.postgres)],
)
def live_backend(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    if name == "postgresql":
        require_postgres()
    return name


@pytest.fixture
def own_database_url(live_backend: str) -> Iterator[str]:
    """A fresh migrated database of the module's backend for a test that breaks it (an
    outage), dropped after the test if it can still be reached."""
    url = make_fresh_database_url(live_backend)
    yield url
    with contextlib.suppress(Exception):
        drop_database(url)


@pytest.fixture(scope="module")
def gateway(live_backend: str, demo_llm: DemoLlm, live_log_dir: Path
            ) -> Iterator[InProcessGateway]:
    pool = _GatewayPool(live_log_dir)
    try:
        yield pool.start(live_backend, upstream=demo_llm)
    finally:
        pool.close()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Every in-process server is stopped by its fixture by now: stop their loop."""
    close_server_loop()


# -- SSE over real HTTP -------------------------------------------------------------------


@dataclass(frozen=True)
class SseEvent:
    event: str
    data: Any
    id: str | None


def parse_sse(text: str) -> list[SseEvent]:
    """Events of a complete `text/event-stream` body (comment/ping lines skipped)."""
    events: list[SseEvent] = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        name, event_id, data_lines = "message", None, []
        for line in block.split("\n"):
            if not line or line.startswith(":"):
                continue
            key, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if key == "event":
                name = value
            elif key == "data":
                data_lines.append(value)
            elif key == "id":
                event_id = value
        if data_lines:
            events.append(SseEvent(name, json.loads("\n".join(data_lines)), event_id))
    return events


@dataclass
class TurnResult:
    """One streamed turn as the client saw it."""

    status_code: int
    events: list[SseEvent]
    raw: str
    body: Any = None

    def of(self, name: str) -> list[SseEvent]:
        return [e for e in self.events if e.event == name]

    def one(self, name: str) -> Any:
        found = self.of(name)
        assert len(found) == 1, f"expected one {name!r} event, got {len(found)}: {self.raw!r}"
        return found[0].data

    @property
    def text(self) -> str:
        """The concatenation of the delta events."""
        return "".join(e.data["text"] for e in self.of("delta"))

    @property
    def names(self) -> list[str]:
        return [e.event for e in self.events]


async def post_turn(client: httpx.AsyncClient, thread_id: str, content: Any,
                    *, raw_body: bytes | None = None) -> TurnResult:
    """POST a message and read the whole answer (SSE) or the error body (JSON)."""
    kwargs: dict[str, Any] = (
        {"content": raw_body, "headers": {"Content-Type": "application/json"}}
        if raw_body is not None else {"json": {"content": content}}
    )
    async with client.stream("POST", f"/api/threads/{thread_id}/messages", **kwargs) as resp:
        text = (await resp.aread()).decode("utf-8")
    if resp.headers.get("content-type", "").startswith("text/event-stream"):
        return TurnResult(resp.status_code, parse_sse(text), text)
    return TurnResult(resp.status_code, [], text, json.loads(text) if text else None)


async def iter_sse(response: httpx.Response) -> AsyncIterator[SseEvent]:
    """Events as they arrive on an open streaming response."""
    buffer = ""
    async for piece in response.aiter_text():
        buffer += piece.replace("\r\n", "\n")
        while "\n\n" in buffer:
            block, buffer = buffer.split("\n\n", 1)
            for event in parse_sse(block + "\n\n"):
                yield event
