"""A module-wide in-process gateway per backend with fast follow-up settings
(tests/followups/helpers), and a hand-moved clock for its follow-up worker."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from app.config.settings import Settings
from app.core.clock import utcnow
from app.gateway.runtime import Runtime
from tests.followups.helpers import FAST_ENV, HandClock
from tests.support.gateway import DemoLlm, GatewayPool, InProcessGateway
from tests.support.runtimes import runtime_of


@pytest.fixture(scope="module")
def fast_gateway(live_backend: str, demo_llm: DemoLlm, live_log_dir: Path
                 ) -> Iterator[InProcessGateway]:
    with GatewayPool(live_log_dir) as pool:
        yield pool.start(live_backend, upstream=demo_llm, env=FAST_ENV)


@pytest.fixture
async def runtime(database_url: str, slow_demo_llm: DemoLlm) -> AsyncIterator[Runtime]:
    """An in-process runtime on the slow demo model: a reply streams long enough to be cut
    mid-way, or to change the thread while it streams."""
    async with runtime_of(Settings(database_url=database_url,
                                   upstream_base_url=slow_demo_llm.base_url,
                                   upstream_max_retries=0, title_calls=False)) as rt:
        yield rt


@pytest.fixture
def hand_clock(fast_gateway: InProcessGateway) -> Iterator[HandClock]:
    """The module gateway's worker runs on a HandClock during the test (the real clock
    again afterwards, so one test's jumps never fire another's follow-ups)."""
    clock = HandClock()
    worker = fast_gateway.worker
    worker.clock = clock
    yield clock
    worker.clock = utcnow
