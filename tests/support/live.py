"""Live servers for end-to-end tests: the demo model server and the gateway, each a real
uvicorn SUBPROCESS on a free 127.0.0.1 port, talked to over real HTTP.

Fixtures (registered for every test directory by the root conftest.py)
    demo_llm        session-wide DemoLlm, fast pace (1 ms a delta, [slow-first] waits 2 s)
    slow_demo_llm   session-wide DemoLlm, 10 ms a delta ([long] then streams for ~10 s):
                    for disconnect and crash tests
    start_gateway   factory: start_gateway(backend, *, upstream=..., env=..., database_url=...)
                    -> LiveGateway; a fresh migrated database per gateway unless database_url
                    is given (restart on the same database); every gateway is stopped and its
                    database dropped after the test
    live_backend    "sqlite" | "postgresql", parametrised per MODULE (PostgreSQL skips loudly
                    when unreachable, fails with CHATGATE_REQUIRE_POSTGRES=1)
    gateway         module-wide LiveGateway on live_backend against demo_llm, auth_mode=keys,
                    short timeouts; tests make their own threads and keys (gateway.api_key)

Plain helpers
    free_port(), start_demo_llm(delay_ms, slow_first_s), wait_for_http(url, process)
    parse_sse(text) -> list[SseEvent];  await post_turn(client, thread_id, content) -> TurnResult
    LiveGateway: url, database_url, log_path, logs(), log_text(), kill9(), stop(),
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.store import api_keys
from app.store.db import Database
from tests.support.databases import drop_database, make_fresh_database_url, require_postgres

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


def wait_for_http(url: str, process: subprocess.Popen[bytes], log_path: Path) -> None:
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


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


@dataclass
class DemoLlm:
    """A running demo model server."""

    url: str
    process: subprocess.Popen[bytes]
    log_path: Path

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
        _stop(self.process)


def start_demo_llm(delay_ms: float, slow_first_s: float, log_dir: Path) -> DemoLlm:
    port = free_port()
    log_path = log_dir / f"demo_llm_{port}.log"
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(
            [sys.executable, "-m", "app.demo_llm", "--host", "127.0.0.1", "--port", str(port),
             "--delay-ms", str(delay_ms), "--slow-first-s", str(slow_first_s),
             "--log-level", "warning"],
            cwd=ROOT, env=_clean_env({}), stdout=log_file, stderr=subprocess.STDOUT,
        )
    demo = DemoLlm(f"http://127.0.0.1:{port}", process, log_path)
    try:
        wait_for_http(demo.url + "/healthz", process, log_path)
    except Exception:
        demo.stop()
        raise
    return demo


@dataclass
class LiveGateway:
    """A running gateway subprocess and the database it owns."""

    url: str
    database_url: str
    log_path: Path
    process: subprocess.Popen[bytes]
    env: dict[str, str] = field(default_factory=dict)

    def client(self, api_key: str | None = None, timeout: float = 30.0) -> httpx.AsyncClient:
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
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def logs(self) -> list[dict[str, Any]]:
        """The gateway's JSON log lines so far (non-JSON lines skipped)."""
        lines: list[dict[str, Any]] = []
        for line in self.log_text().splitlines():
            with contextlib.suppress(ValueError):
                item = json.loads(line)
                if isinstance(item, dict):
                    lines.append(item)
        return lines

    def kill9(self) -> None:
        """Crash the gateway: SIGKILL, no shutdown code runs."""
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)

    def stop(self) -> None:
        _stop(self.process)


def _launch_gateway(database_url: str, env: Mapping[str, str], log_dir: Path) -> LiveGateway:
    port = free_port()
    log_path = log_dir / f"gateway_{port}.log"
    full_env = {**TEST_GATEWAY_ENV, **env, "CHATGATE_DATABASE_URL": database_url}
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "app.main:create_app", "--factory",
             "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning",
             "--timeout-graceful-shutdown", "5"],
            cwd=ROOT, env=_clean_env(full_env), stdout=log_file, stderr=subprocess.STDOUT,
        )
    gateway = LiveGateway(f"http://127.0.0.1:{port}", database_url, log_path, process,
                          dict(full_env))
    try:
        wait_for_http(gateway.url + "/healthz", process, log_path)
    except Exception:
        gateway.stop()
        raise
    return gateway


StartGateway = Callable[..., LiveGateway]


class _GatewayPool:
    """Starts gateways and, at teardown, stops them and drops the databases it made."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.gateways: list[LiveGateway] = []
        self.databases: list[str] = []

    def start(
        self,
        backend: str,
        *,
        upstream: DemoLlm | str | None = None,
        env: Mapping[str, str] | None = None,
        database_url: str | None = None,
    ) -> LiveGateway:
        if database_url is None:
            database_url = make_fresh_database_url(backend)
            self.databases.append(database_url)
        extra = dict(env or {})
        if isinstance(upstream, DemoLlm):
            extra.setdefault("CHATGATE_UPSTREAM_BASE_URL", upstream.base_url)
        elif isinstance(upstream, str):
            extra.setdefault("CHATGATE_UPSTREAM_BASE_URL", upstream)
        gateway = _launch_gateway(database_url, extra, self.log_dir)
        self.gateways.append(gateway)
        return gateway

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
def demo_llm(live_log_dir: Path) -> Iterator[DemoLlm]:
    demo = start_demo_llm(delay_ms=1, slow_first_s=2.0, log_dir=live_log_dir)
    yield demo
    demo.stop()


@pytest.fixture(scope="session")
def slow_demo_llm(live_log_dir: Path) -> Iterator[DemoLlm]:
    demo = start_demo_llm(delay_ms=10, slow_first_s=2.0, log_dir=live_log_dir)
    yield demo
    demo.stop()


@pytest.fixture
def start_gateway(live_log_dir: Path) -> Iterator[StartGateway]:
    pool = _GatewayPool(live_log_dir)
    yield pool.start
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


@pytest.fixture(scope="module")
def gateway(live_backend: str, demo_llm: DemoLlm, live_log_dir: Path) -> Iterator[LiveGateway]:
    pool = _GatewayPool(live_log_dir)
    try:
        yield pool.start(live_backend, upstream=demo_llm)
    finally:
        pool.close()


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
