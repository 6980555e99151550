"""Every operator script pointed at a database that was never migrated, or that cannot be
reached, says so in one sentence (exit 2) instead of a traceback, and changes nothing."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests.support.databases import drop_database, make_fresh_database_url
from tests.support.gateway import ROOT, clean_env, free_port
from tests.support.scripts import run_script

COMMANDS = [
    ("keys.py", "list"),
    ("usage.py", "verify"),
    ("repair_messages.py", "scan", "--check"),
    ("replay_stream.py", "--message-id", "6c3d0f06-5648-4be5-8d16-6ad60b96922f"),
]


@pytest.fixture
def unmigrated_url(backend: str) -> Iterator[str]:
    url = make_fresh_database_url(backend, migrated=False)
    yield url
    drop_database(url)


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_a_script_on_an_unmigrated_database_says_so(
    unmigrated_url: str, command: tuple[str, ...]
) -> None:
    script, *args = command
    done = run_script(script, *args, env={"CHATGATE_DATABASE_URL": unmigrated_url,
                                          "COLUMNS": "200"})
    assert done.returncode == 2, done.stderr
    assert "is not migrated to the newest revision" in done.stderr
    assert "alembic upgrade head" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_a_script_on_an_unreachable_database_says_so(command: tuple[str, ...]) -> None:
    """Started as the operator starts it, a real process: its exit status and its one line
    on stderr are the interpreter's, not a test harness's."""
    script, *args = command
    closed = free_port()  # nothing listens there
    url = f"postgresql+asyncpg://postgres@127.0.0.1:{closed}/chatgate"
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / script), *args],
        cwd=ROOT, env=clean_env({"CHATGATE_DATABASE_URL": url, "COLUMNS": "200"}),
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == (f"error: cannot reach the database {url}: [Errno 111] "
                                   f"Connect call failed ('127.0.0.1', {closed})")
