"""One gateway per module in front of the scripted model server, keys on, side calls and the
rate limit off (a test counts exactly its own calls; the limits have their own tests); and
one LiteLLM process for every test that drives LiteLLM (litellm_worker.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.gateway import GatewayPool, InProcessGateway
from tests.turn.openai.model_server import ModelServer
from tests.turn.openai.outside_clients import JobProcess

HERE = Path(__file__).parent

#: USD per million tokens of the scripted model: a call's cost is known, so it is checked.
PRICES = {"scripted-1": {"prompt": 1.0, "completion": 2.0}}


@pytest.fixture(scope="module")
def model_server() -> Iterator[ModelServer]:
    server = ModelServer().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def oa_gateway(live_backend: str, model_server: ModelServer, live_log_dir: Path,
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessGateway]:
    price_file = tmp_path_factory.mktemp("prices") / "prices.json"
    price_file.write_text(json.dumps(PRICES), encoding="utf-8")
    model_server.requests.clear()  # a test reads the requests of its own backend's run
    with GatewayPool(live_log_dir) as pool:
        yield pool.start(live_backend, upstream=model_server.base_url, env={
            "CHATGATE_TITLE_CALLS": "false", "CHATGATE_SUMMARY_CALLS": "false",
            "CHATGATE_RATE_LIMIT_PER_MINUTE": "0", "CHATGATE_PRICE_FILE": str(price_file),
            "CHATGATE_UPSTREAM_MODEL": "scripted-1", "CHATGATE_MODELS": "scripted-1,other-1",
            # a loaded 2-core machine must not turn a local answer into upstream_timeout
            "CHATGATE_FIRST_TOKEN_TIMEOUT_S": "10",
        })


@pytest.fixture(scope="session")
def litellm_worker() -> Iterator[JobProcess]:
    """LiteLLM's SDK in a process of its own that takes one job after another: importing
    litellm costs about 5 s of CPU, paid once per pytest process instead of once per test.
    It starts at its first job, with the python the test names (the test skips, or fails
    under CI, when LiteLLM's venv is missing)."""
    worker = JobProcess(HERE / "litellm_worker.py")
    yield worker
    worker.stop()
