"""The node clients the tests drive are pinned: every dependency in node/package.json is an
exact version, the one package-lock.json installs (npm ci refuses a lock out of step), so a
new major published upstream cannot change what the tests run."""

from __future__ import annotations

import json
import re
from pathlib import Path

PINS = Path(__file__).parent / "node"


def test_every_node_client_is_pinned_to_the_version_the_lock_installs() -> None:
    declared = json.loads((PINS / "package.json").read_text(encoding="utf-8"))["dependencies"]
    lock = json.loads((PINS / "package-lock.json").read_text(encoding="utf-8"))["packages"]
    assert {"openai", "ai", "@ai-sdk/openai"} <= declared.keys()
    for name, version in declared.items():
        assert re.fullmatch(r"\d+\.\d+\.\d+", version), f"{name}@{version} is not exact"
        assert lock[f"node_modules/{name}"]["version"] == version, name
        assert lock[f"node_modules/{name}"]["integrity"].startswith("sha512-"), name
    assert lock[""]["dependencies"] == declared
