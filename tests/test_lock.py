"""requirements.lock is what the image and a fresh .venv install: it must hold every runtime
dependency of pyproject.toml, each pinned with hashes, and nothing of this machine's pip
configuration. A dependency added to pyproject.toml without `scripts/lock` fails here."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "requirements.lock"
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", re.MULTILINE)


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def dependency_name(spec: str) -> str:
    match = re.match(r"[A-Za-z0-9._-]+", spec)
    assert match is not None, spec
    return normalized(match.group())


def locked() -> dict[str, str]:
    return {normalized(name): version for name, version in PIN.findall(LOCK.read_text())}


def test_every_runtime_dependency_is_locked() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = {dependency_name(spec) for spec in project["dependencies"]}
    assert wanted - set(locked()) == set(), "run scripts/lock"


def test_each_pin_carries_its_hashes_and_no_local_index() -> None:
    text = LOCK.read_text()
    entries = re.split(r"\n(?=[A-Za-z0-9])", text.split("\n\n", 1)[-1].strip())
    pinned = [entry for entry in entries if PIN.match(entry)]
    assert len(pinned) == len(locked()) > 0
    assert all("--hash=sha256:" in entry for entry in pinned)
    assert not re.search(r"^--(index-url|extra-index-url|find-links|trusted-host)", text,
                         re.MULTILINE)


def test_what_the_gateway_does_not_run_is_not_installed() -> None:
    """uvicorn[standard] brought a reloader and a WebSocket stack; the gateway uses neither,
    but does run on uvloop and httptools, which uvicorn picks when they are installed."""
    pins = locked()
    assert {"watchfiles", "websockets", "pyyaml"} & set(pins) == set()
    assert {"uvloop", "httptools", "uvicorn"} <= set(pins)


def test_the_image_installs_the_lock() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "pip install --require-hashes -r requirements.lock" in dockerfile
    assert "pip install --no-deps ." in dockerfile
