"""The anthropic TypeScript SDK, run by node, against /v1/messages: every public marker case,
streamed (`messages.stream`) and whole (`messages.create`), gives exactly the spec's clean
text and METADATA. The SDK is pinned (node/package.json and package-lock.json) and installed
with `npm ci` into a folder named by the lock's hash (~/.cache/chatgate-node, reused between
runs). Without node the test is skipped, loudly; under CI it fails instead."""

from __future__ import annotations

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
from tests.turn.openai.outside_clients import case_lines
from tests.turn.openai.test_node_client import (
    INSTALL_TIMEOUT_S,
    NODE_DIR,
    RUN_TIMEOUT_S,
    node_and_npm,
)

PINNED = Path(__file__).parent / "node"


@pytest.fixture(scope="module")
def live_backend() -> str:
    """One database is enough: what a client sees on the wire does not depend on it
    (test_sdk runs the endpoint on both)."""
    return "sqlite"


def installed_sdk(npm: str) -> Path:
    """A folder with the pinned node_modules (`npm ci`, once per lock file) and the script."""
    lock = (PINNED / "package-lock.json").read_bytes()
    folder = NODE_DIR.parent / f"anthropic-{hashlib.sha256(lock).hexdigest()[:12]}"
    if not (folder / "node_modules" / "@anthropic-ai" / "sdk" / "package.json").exists():
        folder.mkdir(parents=True, exist_ok=True)
        for name in ("package.json", "package-lock.json"):
            shutil.copy(PINNED / name, folder / name)
        subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=folder, check=True,
                       timeout=INSTALL_TIMEOUT_S, capture_output=True)
    shutil.copy(PINNED / "anthropic_client.mjs", folder / "anthropic_client.mjs")
    return folder


async def test_the_anthropic_typescript_sdk_gets_every_case_clean(
    oa_gateway: InProcessGateway, model_server: ModelServer
) -> None:
    node, npm = node_and_npm()
    folder = installed_sdk(npm)
    keys = {prepare(model_server, case, "anthropic-node"): case for case in CASES}
    env = {**os.environ, "CHATGATE_BASE_URL": oa_gateway.url,
           "CHATGATE_API_KEY": await oa_gateway.api_key("anthropic-node"),
           "CHATGATE_MODEL": "scripted-1", "CHATGATE_CASE_KEYS": json.dumps(list(keys))}
    result = subprocess.run([node, "anthropic_client.mjs"], cwd=folder, env=env, text=True,
                            capture_output=True, timeout=RUN_TIMEOUT_S, check=False)
    for case, line in case_lines(result, keys):
        text, metadata, warnings = expected(case)
        assert (line["streamed"], line["metadata"], line["warnings"]) == (
            text, metadata, warnings), case["id"]
        assert (line["final"], line["whole"], line["wholeMetadata"]) == (
            text, text, metadata), case["id"]
        assert line["stopReasons"] == ["end_turn", "end_turn"]
        assert (line["usage"]["input_tokens"], line["usage"]["output_tokens"]) == (11, 7)
