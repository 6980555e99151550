"""The three kinds of test gateway and what they have in common.

    Gateway                 client(api_key), api_key(user, ...), samples/gauge/refusals (/metrics)
      SameLoopGateway       the app in the test's own event loop, in memory (ASGITransport):
                            the test reaches its runtime and holds turns open (`hold_turn`);
                            its logs go to the test's stdout (capsys)
      LiveGateway           url, database_url, env, logs(), log_text(), stop()
        InProcessGateway    uvicorn on the session's server loop, on a loopback port;
                            client() in memory, client(over_http=True) over the socket
        GatewayProcess      a process of its own (forked or spawned): kill9()

`GatewayPool` starts live gateways, each on a fresh migrated database unless given one, and
at close stops them and drops those databases."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import signal
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import httpx
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample
from starlette.applications import Starlette

from app.followups.worker import FollowupWorker
from app.gateway.main import create_app
from app.gateway.runtime import Runtime
from app.keys import repository as api_keys
from app.keys.service import Principal
from app.store.db import Database
from app.turn.native.turn import Turn, admit_turn
from tests.support.databases import drop_database, make_fresh_database_url
from tests.support.gateway.processes import (
    ProcessHandle,
    start_gateway_process,
    stop_process,
    wait_for_http,
)
from tests.support.gateway.servers import (
    InProcessServer,
    LogSink,
    LoopAsgiTransport,
    build_gateway_app,
    free_port,
)
from tests.support.gateway.settings import gateway_env, gateway_settings, settings_from_env
from tests.support.gateway.upstream import DemoLlm
from tests.support.http import LOOPBACK_TLS

T = TypeVar("T")


def json_lines(text: str) -> list[dict[str, Any]]:
    """The JSON object lines of a log (other lines skipped)."""
    lines: list[dict[str, Any]] = []
    for line in text.splitlines():
        with contextlib.suppress(ValueError):
            item = json.loads(line)
            if isinstance(item, dict):
                lines.append(item)
    return lines


async def _new_key(db: Database, user: str, admin: bool, tokens: int | None,
                   cost_usd: float | None, models: list[str] | None) -> str:
    async with db.transaction() as session:
        row, plaintext = await api_keys.create_key(session, user, "test", is_admin=admin)
        if tokens is not None or cost_usd is not None:
            await api_keys.set_budget(session, row.id, tokens=tokens, cost_usd=cost_usd)
        if models is not None:
            await api_keys.set_models(session, row.id, models)
    return plaintext


def _auth(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


class Gateway:
    """What every kind of test gateway offers."""

    def client(self, api_key: str | None = None, timeout: float = 30.0) -> httpx.AsyncClient:
        raise NotImplementedError

    async def _with_db(self, use: Callable[[Database], Coroutine[Any, Any, T]]) -> T:
        """`use` run on the gateway's database, where its connections live."""
        raise NotImplementedError

    async def api_key(self, user: str, *, admin: bool = False, tokens: int | None = None,
                      cost_usd: float | None = None, models: list[str] | None = None) -> str:
        """A new API key for `user`, made directly in the gateway's database, with a daily
        budget when given, limited to `models` when given."""
        return await self._with_db(
            lambda db: _new_key(db, user, admin, tokens, cost_usd, models))

    async def samples(self, name: str) -> list[Sample]:
        """The samples named `name`, as GET /metrics shows them."""
        async with self.client() as client:
            text = (await client.get("/metrics")).text
        return [s for f in text_string_to_metric_families(text) for s in f.samples
                if s.name == name]

    async def gauge(self, name: str) -> float:
        """A gauge without labels (0 when absent)."""
        return next((s.value for s in await self.samples(name)), 0.0)

    async def refusals(self) -> dict[str, float]:
        """chatgate_refusals_total by reason."""
        return {s.labels["reason"]: s.value
                for s in await self.samples("chatgate_refusals_total")}


# -- in the test's own loop ---------------------------------------------------------------


class SameLoopGateway(Gateway):
    """`create_app(settings)` with its lifespan, in the test's event loop, spoken to through
    httpx.ASGITransport. ASGITransport hands a response over only once it is complete, so a
    stream that must stay open while the test sends other requests is opened at the service
    level (`hold_turn`): the same gate, rows and upstream slot as the endpoint's, without the
    socket."""

    def __init__(self, app: Starlette) -> None:
        self.app = app

    @property
    def runtime(self) -> Runtime:
        rt: Runtime = self.app.state.runtime
        return rt

    def client(self, api_key: str | None = None, timeout: float = 30.0) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=httpx.ASGITransport(app=self.app),
                                 base_url="http://gateway.test", headers=_auth(api_key),
                                 timeout=timeout)

    async def _with_db(self, use: Callable[[Database], Coroutine[Any, Any, T]]) -> T:
        return await use(self.runtime.db)

    async def hold_turn(self, user: str, thread_id: str) -> Turn:
        """A turn opened through the gate and left unstreamed: its row is `streaming` and it
        holds an upstream slot until `finish()`."""
        return await admit_turn(self.runtime.gate, Principal(user, False), uuid.UUID(thread_id),
                                "hi")


@asynccontextmanager
async def same_loop_gateway(database_url: str, upstream: DemoLlm, **overrides: Any
                            ) -> AsyncIterator[SameLoopGateway]:
    """A SameLoopGateway on `database_url` (already migrated) with gateway_settings."""
    app = create_app(gateway_settings(database_url, upstream, **overrides))
    async with app.router.lifespan_context(app):
        yield SameLoopGateway(app)


class FakeClock:
    """A clock the test moves by hand (the limits decide windows and days by it)."""

    def __init__(self, now: dt.datetime) -> None:
        self.now = now

    def __call__(self) -> dt.datetime:
        return self.now


# -- live: a server on a loopback port ----------------------------------------------------


class LiveGateway(Gateway):
    """A running gateway on a loopback port and the database it owns."""

    def __init__(self, url: str, database_url: str, env: Mapping[str, str]) -> None:
        self.url = url
        self.database_url = database_url
        self.env = dict(env)

    def client(self, api_key: str | None = None, timeout: float = 30.0, *,
               over_http: bool = True) -> httpx.AsyncClient:
        """A client over real HTTP (the only way into a process)."""
        return httpx.AsyncClient(base_url=self.url, headers=_auth(api_key), timeout=timeout,
                                 verify=LOOPBACK_TLS)

    async def _with_db(self, use: Callable[[Database], Coroutine[Any, Any, T]]) -> T:
        db = Database(self.database_url)
        try:
            return await use(db)
        finally:
            await db.dispose()

    def log_text(self) -> str:
        raise NotImplementedError

    def logs(self) -> list[dict[str, Any]]:
        """The gateway's JSON log lines so far (non-JSON lines skipped)."""
        return json_lines(self.log_text())

    def stop(self) -> None:
        raise NotImplementedError


class InProcessGateway(LiveGateway):
    """`create_app(Settings(...))` served in this process, on the server loop (servers.py).

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
        return httpx.AsyncClient(transport=LoopAsgiTransport(self.app, self.server.sink),
                                 base_url="http://gateway", headers=_auth(api_key),
                                 timeout=timeout)

    async def _with_db(self, use: Callable[[Database], Coroutine[Any, Any, T]]) -> T:
        """On the server loop, through the gateway's own connection pool."""
        return await self.server.loop.arun(use(self.runtime.db))

    def log_text(self) -> str:
        return self.server.sink.text()

    def open_connections(self) -> list[Any]:
        """The server's open client sockets (uvicorn's protocol objects; `cycle` is the request
        one is reading or answering): a test speaking raw HTTP waits on these, not the clock."""
        return list(self.server.server.server_state.connections)

    def stop(self) -> None:
        self.server.stop()


class GatewayProcess(LiveGateway):
    """A gateway PROCESS under uvicorn (the way it runs in production)."""

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
        stop_process(self.process)


def start_in_process_gateway(database_url: str, env: Mapping[str, str]) -> InProcessGateway:
    """An InProcessGateway on `database_url` with TEST_GATEWAY_ENV and `env`."""
    full_env = gateway_env(database_url, env)
    app = build_gateway_app(settings_from_env(full_env))
    return InProcessGateway(InProcessServer(app, LogSink()), app, database_url, full_env)


def spawn_gateway(database_url: str, env: Mapping[str, str], log_dir: Path) -> GatewayProcess:
    """A GatewayProcess on `database_url` with TEST_GATEWAY_ENV and `env`, started but not yet
    answering (`wait_until_up`)."""
    port = free_port()
    log_path = log_dir / f"gateway_{port}.log"
    full_env = gateway_env(database_url, env)
    process = start_gateway_process(port, full_env, log_path)
    return GatewayProcess(f"http://127.0.0.1:{port}", database_url, full_env, log_path,
                          process)


def wait_until_up(gateways: list[GatewayProcess]) -> None:
    """Return once every gateway answers /healthz; stop them all if one does not."""
    try:
        for gateway in gateways:
            wait_for_http(gateway.url + "/healthz", gateway.process, gateway.log_path)
    except Exception:
        for gateway in gateways:
            gateway.stop()
        raise


class GatewayPool:
    """Starts live gateways and, at close (or the end of a `with`), stops them and drops the
    databases it made. A database is made fresh and migrated per start unless `database_url`
    is given (a restart on the same database)."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.gateways: list[LiveGateway] = []
        self.databases: list[str] = []

    def __enter__(self) -> GatewayPool:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()

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
        gateway = start_in_process_gateway(url, extra)
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
        """A gateway process."""
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
        """`count` gateway processes on one database, started side by side (each takes
        a moment to start; they need not wait for each other)."""
        if database_url is None:
            database_url = make_fresh_database_url(backend)
            self.databases.append(database_url)
        return self.start_processes_on(backend, [database_url] * count, upstream=upstream,
                                       env=env)

    def start_processes_on(
        self,
        backend: str,
        database_urls: list[str],
        *,
        upstream: DemoLlm | str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> list[GatewayProcess]:
        """A gateway process on each of `database_urls`, started side by side: processes
        that reach one database different ways (directly, through a proxy of the test's)."""
        gateways = []
        for database_url in database_urls:
            url, extra = self._prepare(backend, upstream, env, database_url)
            gateways.append(spawn_gateway(url, extra, self.log_dir))
        self.gateways.extend(gateways)
        wait_until_up(gateways)
        return gateways

    def close(self) -> None:
        for gateway in self.gateways:
            gateway.stop()
        for url in self.databases:
            with contextlib.suppress(Exception):
                drop_database(url)
