"""What the tests of `scripts/serve` share: the script and a .venv its bootstrap leaves alone."""

from __future__ import annotations

import hashlib

import pytest

from tests.support.gateway import ROOT

SERVE = ROOT / "scripts" / "serve"
#: What scripts/bootstrap.sh installs .venv from, in the order its stamp hashes them.
INSTALLED_FROM = ("pyproject.toml", "requirements.lock")


@pytest.fixture(scope="session")
def installed_venv() -> None:
    """scripts/serve's bootstrap is a no-op only when .venv is installed from the current
    pyproject.toml and requirements.lock (the stamp is the sha256 of the two, one after the
    other); otherwise it would pip install from inside the test."""
    stamp = ROOT / ".venv" / ".chatgate-installed"
    want = hashlib.sha256(b"".join((ROOT / name).read_bytes()
                                   for name in INSTALLED_FROM)).hexdigest()
    if not stamp.is_file() or stamp.read_text().split()[:1] != [want]:
        pytest.skip(".venv is not installed from the current pyproject.toml and "
                    "requirements.lock: run scripts/test")
