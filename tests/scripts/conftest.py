"""What the tests of `scripts/serve` share: the script, and a .venv its bootstrap leaves alone."""

from __future__ import annotations

import hashlib

import pytest

from tests.support.gateway import ROOT

SERVE = ROOT / "scripts" / "serve"


@pytest.fixture(scope="session")
def installed_venv() -> None:
    """scripts/serve's bootstrap is a no-op only when .venv is installed from the current
    pyproject.toml; otherwise it would pip install from inside the test."""
    stamp = ROOT / ".venv" / ".chatgate-installed"
    want = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    if not stamp.is_file() or stamp.read_text().split()[:1] != [want]:
        pytest.skip(".venv is not installed from the current pyproject.toml: run scripts/test")
