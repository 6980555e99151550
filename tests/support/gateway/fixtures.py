"""The gateway fixtures, registered for every test directory by the root conftest.py.

    demo_llm        session-wide DemoLlm, no pause between deltas ([slow-first] waits 1.5 s)
    slow_demo_llm   session-wide DemoLlm, 10 ms a delta ([long] then streams for ~10 s):
                    for disconnect and crash tests
    start_gateway   factory: start_gateway(backend, *, upstream=..., env=..., database_url=...)
                    -> InProcessGateway; a fresh migrated database per gateway unless
                    database_url is given (restart on the same database); every gateway is
                    stopped and its database dropped after the test
    start_gateway_process
                    the same factory for a gateway PROCESS (GatewayProcess, kill9()): for what
                    only a process shows (a crash, two processes on one database)
    start_gateway_processes
                    start_gateway_processes(backend, count, ...): several at once, one database
    live_backend    "sqlite" | "postgresql", parametrised per MODULE (PostgreSQL skips loudly
                    when unreachable, fails with CHATGATE_REQUIRE_POSTGRES=1)
    own_database_url
                    a fresh database on live_backend for a test that breaks it (an outage)
    gateway         module-wide InProcessGateway on live_backend against demo_llm,
                    auth_mode=keys, short timeouts; tests make their own threads and keys
                    (gateway.api_key)
    live_log_dir    where gateway processes write their logs (a GatewayPool's `log_dir`)
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.databases import (
    BACKEND_PARAMS,
    backend_param,
    drop_database,
    make_fresh_database_url,
)
from tests.support.gateway.gateways import GatewayPool, GatewayProcess, InProcessGateway
from tests.support.gateway.servers import close_server_loop
from tests.support.gateway.upstream import DemoLlm, start_demo_llm

StartGateway = Callable[..., InProcessGateway]
StartGatewayProcess = Callable[..., GatewayProcess]
StartGatewayProcesses = Callable[..., list[GatewayProcess]]


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
    with GatewayPool(live_log_dir) as pool:
        yield pool.start


@pytest.fixture
def start_gateway_process(live_log_dir: Path) -> Iterator[StartGatewayProcess]:
    with GatewayPool(live_log_dir) as pool:
        yield pool.start_process


@pytest.fixture
def start_gateway_processes(live_log_dir: Path) -> Iterator[StartGatewayProcesses]:
    """start_gateway_processes(backend, count, *, upstream=..., env=...) -> [GatewayProcess]:
    several processes on one fresh database."""
    with GatewayPool(live_log_dir) as pool:
        yield pool.start_processes


@pytest.fixture(scope="module", params=BACKEND_PARAMS)
def live_backend(request: pytest.FixtureRequest) -> str:
    """The backend of the module's gateways: a module runs once on each."""
    return backend_param(request)


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
    with GatewayPool(live_log_dir) as pool:
        yield pool.start(live_backend, upstream=demo_llm)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Every in-process server is stopped by its fixture by now: stop their loop."""
    close_server_loop()
