"""A module-wide in-process gateway per backend with fast follow-up settings
(tests/followups/helpers)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.followups.helpers import FAST_ENV
from tests.support.live import DemoLlm, InProcessGateway, _GatewayPool


@pytest.fixture(scope="module")
def fast_gateway(live_backend: str, demo_llm: DemoLlm, live_log_dir: Path
                 ) -> Iterator[InProcessGateway]:
    pool = _GatewayPool(live_log_dir)
    try:
        yield pool.start(live_backend, upstream=demo_llm, env=FAST_ENV)
    finally:
        pool.close()
