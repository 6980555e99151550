"""The page tests' gateways (the browser is tests/support/browser.py's)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.gateway import DemoLlm, GatewayPool, LiveGateway, StartGatewayProcess
from tests.web.page_helpers import AUTH_OFF


@pytest.fixture(scope="module")
def module_gateways(live_log_dir: Path) -> Iterator[GatewayPool]:
    """Starts the gateway processes a module's tests share; stops them, and drops their
    databases, after the module's last test (pytest-xdist's `--dist loadscope` keeps a module
    on one worker)."""
    with GatewayPool(live_log_dir) as pool:
        yield pool


@pytest.fixture(scope="module")
def web_gateway(module_gateways: GatewayPool, demo_llm: DemoLlm) -> LiveGateway:
    """The module's gateway subprocess (SQLite, auth off) on the fast demo model (which
    thinks at its own pace, 30 ms a piece). Not in process: served from the test process, a
    turn sent right after "New thread" can finish before the page's history load, which then
    wipes the live bubble.

    Shared by the module's tests, as a process costs about a second of CPU to start: each
    test makes threads of its own ("New thread", store_answers) and looks at those alone. A
    test that reads the whole thread list (its count, its only item) or the state before any
    thread takes `fresh_gateway`."""
    return module_gateways.start_process("sqlite", upstream=demo_llm, env=AUTH_OFF)


@pytest.fixture
def fresh_gateway(start_gateway_process: StartGatewayProcess, demo_llm: DemoLlm
                  ) -> LiveGateway:
    """web_gateway, but of this test alone: a fresh, empty database."""
    return start_gateway_process("sqlite", upstream=demo_llm, env=AUTH_OFF)


@pytest.fixture
def gateway_url(web_gateway: LiveGateway) -> str:
    """web_gateway's address."""
    return web_gateway.url


@pytest.fixture(scope="module")
def slow_gateway(module_gateways: GatewayPool, slow_demo_llm: DemoLlm) -> LiveGateway:
    """Like web_gateway (shared by the module's tests), on the 10 ms-a-delta demo server (a
    [long] answer takes seconds)."""
    return module_gateways.start_process("sqlite", upstream=slow_demo_llm, env=AUTH_OFF)


@pytest.fixture
def slow_gateway_url(slow_gateway: LiveGateway) -> str:
    """slow_gateway's address."""
    return slow_gateway.url
