"""openai-node, run by node, against /v1: every conformance case, streamed and whole, gives
exactly the spec's clean text and METADATA. The SDK is installed from the npm registry into a
folder this test owns (~/.cache/chatgate-node, reused between runs). Without node the test
is skipped, loudly; under CI (CI=true or CHATGATE_REQUIRE_BROWSER=1) it fails instead."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.gateway import InProcessGateway
from tests.turn.openai.cases import CASES, expected, prepare
from tests.turn.openai.model_server import ModelServer
from tests.turn.openai.outside_clients import case_lines, missing_client

HERE = Path(__file__).parent
#: The major version the script is written against.
OPENAI_NODE = "openai@6"
NODE_DIR = Path(os.environ.get("CHATGATE_NODE_CACHE",
                               Path.home() / ".cache" / "chatgate-node")) / "openai-6"
INSTALL_TIMEOUT_S = 300
RUN_TIMEOUT_S = 300


@pytest.fixture(scope="module")
def live_backend() -> str:
    """One database is enough here: what this client sees on the wire does not depend on it
    (test_chat and test_sdk run the endpoint on both)."""
    return "sqlite"


def node_and_npm() -> tuple[str, str]:
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        missing_client("node and npm are needed to run openai-node against the gateway")
    return node, npm


def installed_sdk(npm: str) -> Path:
    """The folder with node_modules/openai, installed once."""
    if not (NODE_DIR / "node_modules" / "openai" / "package.json").exists():
        NODE_DIR.mkdir(parents=True, exist_ok=True)
        (NODE_DIR / "package.json").write_text('{"private": true}\n', encoding="utf-8")
        subprocess.run([npm, "install", "--no-audit", "--no-fund", OPENAI_NODE],
                       cwd=NODE_DIR, check=True, timeout=INSTALL_TIMEOUT_S,
                       capture_output=True)
    shutil.copy(HERE / "node_client.mjs", NODE_DIR / "node_client.mjs")
    return NODE_DIR


async def test_openai_node_gets_every_case_clean(
    oa_gateway: InProcessGateway, model_server: ModelServer
) -> None:
    node, npm = node_and_npm()
    folder = installed_sdk(npm)
    keys = {prepare(model_server, case, "node"): case for case in CASES}
    env = {**os.environ, "CHATGATE_BASE_URL": oa_gateway.url + "/v1",
           "CHATGATE_API_KEY": await oa_gateway.api_key("node-sdk"),
           "CHATGATE_MODEL": "scripted-1", "CHATGATE_CASE_KEYS": json.dumps(list(keys))}
    result = subprocess.run([node, "node_client.mjs"], cwd=folder, env=env, text=True,
                            capture_output=True, timeout=RUN_TIMEOUT_S, check=False)
    for case, line in case_lines(result, keys):
        text, metadata, warnings = expected(case)
        assert (line["streamed"], line["metadata"], line["warnings"]) == (
            text, metadata, warnings), case["id"]
        assert (line["whole"], line["wholeMetadata"]) == (text, metadata), case["id"]
        assert line["usage"]["total_tokens"] == 18
