"""Models files the tests give a gateway (CHATGATE_MODELS_FILE)."""

from __future__ import annotations

from pathlib import Path

from tests.support.gateway import DemoLlm


def two_models(tmp_path: Path, demo: DemoLlm) -> str:
    """`first` and `second` (asked upstream as demo-2), each on a server of its own name
    (both the one demo model server)."""
    path = tmp_path / "models.toml"
    path.write_text(f"""
[servers.a]
base_url = "{demo.base_url}"

[servers.b]
base_url = "{demo.base_url}"

[[models]]
name = "first"
server = "a"
model_id = "demo-1"

[[models]]
name = "second"
server = "b"
model_id = "demo-2"
""")
    return str(path)
