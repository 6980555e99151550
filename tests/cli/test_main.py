"""`chatgate` as an operator types it: the console script in .venv/bin, and the old script
paths run as programs (they said `Permission denied`), each a real process on a fresh
SQLite file. `usage report` with no range is the dashboard's 30 days, and piped it keeps
every value whole."""

from __future__ import annotations

import datetime as dt
import re
import subprocess
from pathlib import Path

import pytest

from app.store.db import Database
from tests.store.factories import bill, spent
from tests.support.gateway import ROOT, clean_env

CHATGATE = ROOT / ".venv" / "bin" / "chatgate"
KEY_ID = re.compile(r"key id: ([0-9a-f-]{36})")
#: A user id far wider than 80 columns: piped, rich cut it to "…" or wrapped it.
LONG_USER = "operator-with-a-very-long-user-id-" + "x" * 60


def run(command: list[str], database_url: str) -> subprocess.CompletedProcess[str]:
    """`command` as a process writing into pipes (no terminal, no COLUMNS)."""
    env = clean_env({"CHATGATE_DATABASE_URL": database_url})
    env.pop("COLUMNS", None)
    return subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=120, check=False)


@pytest.fixture
def database_url(installed_venv: None, tmp_path: Path) -> str:
    """A migrated SQLite file, by `chatgate migrate`: .venv installed from this checkout's
    pyproject.toml has the command (else the test is skipped, as serve's are)."""
    assert CHATGATE.exists(), f"{CHATGATE} is missing from an up-to-date .venv"
    url = f"sqlite+aiosqlite:///{tmp_path}/chatgate.db"
    done = run([str(CHATGATE), "migrate"], url)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "migrated sqlite+aiosqlite:///" in done.stdout
    return url


def test_chatgate_and_the_old_script_paths_run_the_same_commands(database_url: str) -> None:
    created = run([str(CHATGATE), "keys", "create", "--user", "alice"], database_url)
    assert created.returncode == 0, created.stdout + created.stderr
    found = KEY_ID.search(created.stdout)
    assert found is not None, created.stdout
    key_id = found.group(1)
    listed = run([str(ROOT / "scripts" / "keys.py"), "list"], database_url)  # executable
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert key_id in listed.stdout
    budget = run([str(CHATGATE), "keys", "budget", key_id[:8], "--tokens", "300"],
                 database_url)
    assert budget.returncode == 0, budget.stdout + budget.stderr
    assert f"budget of {key_id}: 300 tokens a day" in budget.stdout
    for script in ("usage.py", "repair_messages.py", "replay_stream.py"):
        helped = run([str(ROOT / "scripts" / script), "--help"], database_url)
        assert helped.returncode == 0, script + helped.stderr
    replay = run([str(CHATGATE), "replay", "--help"], database_url)
    assert replay.returncode == 0 and "export" in replay.stdout
    serve = run([str(CHATGATE), "serve", "--help"], database_url)
    assert serve.returncode == 0 and "--demo-port" in serve.stdout
    assert "usage: chatgate serve" in serve.stdout


async def test_usage_report_is_the_last_30_days_and_piped_keeps_every_value_whole(
        database_url: str) -> None:
    today = dt.datetime.now(dt.UTC).date()
    db = Database(database_url)
    try:
        for day, tokens in ((today, 1234), (today - dt.timedelta(days=29), 1000),
                            (today - dt.timedelta(days=30), 99_999)):  # one day too old
            at = dt.datetime.combine(day, dt.time(12), tzinfo=dt.UTC)
            await bill(db, LONG_USER, spent("demo-1", tokens, 0.5), at=at)
    finally:
        await db.dispose()
    done = run([str(CHATGATE), "usage", "report", "--by", "user"], database_url)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert any(f"{today - dt.timedelta(days=29)} .. {today}" in line for line in lines)
    [row] = [line for line in lines if LONG_USER in line]
    assert "2,234" in row  # the two days in range, on the user's own line
    assert "…" not in done.stdout
