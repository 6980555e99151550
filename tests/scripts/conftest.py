"""What the tests of `scripts/serve` share: the script, a .venv its bootstrap leaves alone, and
a wait for the gateway it starts."""

from __future__ import annotations

import contextlib
import hashlib
import subprocess
import time
from pathlib import Path

import httpx
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


#: As long as tests.support.gateway's wait_for_http waits for a process to answer.
READY_TIMEOUT_S = 30.0


def wait_until_answering(url: str, process: subprocess.Popen[bytes], log_path: Path) -> None:
    """Poll `url` until 200, as tests.support.gateway's wait_for_http does, with one client:
    httpx.get makes a client each time, and with it a TLS context, about 25 ms of CPU, a third
    of a core at this pace taken from scripts/serve over the seconds of its start (it imports
    on the same cores). Fails with the log's end if the process exits or takes too long."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    with httpx.Client(timeout=1.0) as client:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"{url}: process exited with {process.returncode}\n"
                                   f"{log_path.read_text(errors='replace')[-4000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if client.get(url).status_code == 200:
                    return
            time.sleep(0.05)
    raise RuntimeError(f"{url} not up after {READY_TIMEOUT_S} s\n"
                       f"{log_path.read_text(errors='replace')[-4000:]}")
