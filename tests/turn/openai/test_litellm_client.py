"""LiteLLM's Python SDK, pointed at /v1 as an OpenAI-compatible base (`openai/<model>`,
`api_base`): every conformance case, streamed and whole, gives exactly the spec's clean text,
and LiteLLM hands on the `chatgate` extension (METADATA, warnings) of the finish chunk and of
the whole response. LiteLLM runs in its own venv made by scripts/test_clients.sh (it is no
project dependency); without that venv the test skips, loudly; under CI (CI=true or
CHATGATE_REQUIRE_BROWSER=1) it fails instead."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.support.gateway import InProcessGateway
from tests.turn.openai.cases import CASES, expected, prepare
from tests.turn.openai.model_server import ModelServer
from tests.turn.openai.outside_clients import JobProcess, case_lines, missing_client

VENV = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / (
    "chatgate-clients/litellm-venv")
RUN_TIMEOUT_S = 300
#: Anything but loopback goes to a closed port: LiteLLM must never reach the network.
NO_NETWORK = "http://127.0.0.1:9"
#: LiteLLM's own switches for an offline run: its bundled cost map, no Hugging Face hub.
OFFLINE_ENV = {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "HF_HUB_OFFLINE": "1",
               "LITELLM_LOG": "ERROR", "HTTP_PROXY": NO_NETWORK, "HTTPS_PROXY": NO_NETWORK,
               "ALL_PROXY": NO_NETWORK, "NO_PROXY": "127.0.0.1,localhost"}


@pytest.fixture(scope="module")
def live_backend() -> str:
    """One database is enough here: what this client sees on the wire does not depend on it
    (test_chat and test_sdk run the endpoint on both)."""
    return "sqlite"


def litellm_python() -> Path:
    python = VENV / "bin" / "python"
    if not (python.exists() and (VENV / ".chatgate-litellm").exists()):
        missing_client(f"LiteLLM's venv {VENV} is missing: run `bash scripts/test_clients.sh`")
    return python


def client_env() -> dict[str, str]:
    """The environment of LiteLLM's process: ours without our venv or proxies, offline."""
    env = {name: value for name, value in os.environ.items()
           if name not in {"PYTHONPATH", "VIRTUAL_ENV"} and not name.lower().endswith("_proxy")}
    return {**env, **OFFLINE_ENV}


def run_litellm(worker: JobProcess, client: str, base_url: str, api_key: str,
                keys: list[str]) -> subprocess.CompletedProcess[str]:
    """`client`'s cases (litellm_worker.py: "chat" or "reasoning") run by LiteLLM against
    `base_url` for the model scripted-1, one line per case."""
    job = {"client": client, "base": base_url, "api_key": api_key, "model": "scripted-1",
           "keys": keys}
    return worker.run(litellm_python(), client_env(), job, RUN_TIMEOUT_S)


async def test_litellm_gets_every_case_clean(
    oa_gateway: InProcessGateway, model_server: ModelServer, litellm_worker: JobProcess
) -> None:
    keys = {prepare(model_server, case, "litellm"): case for case in CASES}
    result = run_litellm(litellm_worker, "chat", oa_gateway.url + "/v1",
                         await oa_gateway.api_key("litellm-sdk"), list(keys))
    for case, line in case_lines(result, keys):
        text, metadata, warnings = expected(case)
        assert (line["streamed"], line["metadata"], line["warnings"]) == (
            text, metadata, warnings), case["id"]
        assert (line["whole"], line["wholeMetadata"], line["wholeWarnings"]) == (
            text, metadata, warnings), case["id"]
        assert line["usage"]["total_tokens"] == line["wholeUsage"]["total_tokens"] == 18
