"""openai-node, run by node, against /v1: every conformance case, streamed and whole, gives
exactly the spec's clean text and METADATA. The node clients are pinned by node/package.json
and node/package-lock.json beside this file, and installed with `npm ci` into a folder named
by the lock's hash (~/.cache/chatgate-node/clients-<hash>, reused between runs and
worktrees): a changed lock gets a fresh install, never a folder left by another version.
Without node the test is skipped, loudly; under CI (CI=true or CHATGATE_REQUIRE_BROWSER=1)
it fails instead."""

from __future__ import annotations

import fcntl
import hashlib
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
#: package.json and package-lock.json: the clients' exact versions (npm ci installs the lock).
PINS = HERE / "node"
PIN_FILES = ("package.json", "package-lock.json")
LOCK_HASH = hashlib.sha256(b"".join((PINS / name).read_bytes() for name in PIN_FILES)
                           ).hexdigest()[:16]
NODE_DIR = Path(os.environ.get("CHATGATE_NODE_CACHE",
                               Path.home() / ".cache" / "chatgate-node")) / f"clients-{LOCK_HASH}"
#: Written last by a complete install: a folder without it is made again from nothing.
STAMP = ".chatgate-installed"
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


def installed_clients(npm: str) -> Path:
    """The folder with the locked node clients (openai, ai, @ai-sdk/openai), installed with
    `npm ci` once per lock (one process at a time: xdist workers share the folder); the
    scripts are copied in beside node_modules."""
    NODE_DIR.parent.mkdir(parents=True, exist_ok=True)
    stamp = NODE_DIR / STAMP
    with open(NODE_DIR.parent / f".{NODE_DIR.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not stamp.exists() or stamp.read_text(encoding="utf-8").strip() != LOCK_HASH:
            shutil.rmtree(NODE_DIR, ignore_errors=True)  # half-made: made again from nothing
            NODE_DIR.mkdir()
            for name in PIN_FILES:
                shutil.copy(PINS / name, NODE_DIR / name)
            subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=NODE_DIR, check=True,
                           timeout=INSTALL_TIMEOUT_S, capture_output=True)
            stamp.write_text(LOCK_HASH + "\n", encoding="utf-8")
    for script in HERE.glob("*.mjs"):
        shutil.copy(script, NODE_DIR / script.name)
    return NODE_DIR


async def test_openai_node_gets_every_case_clean(
    oa_gateway: InProcessGateway, model_server: ModelServer
) -> None:
    node, npm = node_and_npm()
    folder = installed_clients(npm)
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
