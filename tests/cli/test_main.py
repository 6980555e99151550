"""`chatgate` as an operator types it: the console script in .venv/bin, and the old script
paths run as programs (they said `Permission denied`), each a real process on a SQLite file
`chatgate migrate` made for this module (each test writes its own user's rows). `usage
report` with no range is the dashboard's 30 days, and piped it keeps every value whole."""

from __future__ import annotations

import datetime as dt
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor

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


@pytest.fixture(scope="module")
def database_url(installed_venv: None, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A migrated SQLite file, by `chatgate migrate`: .venv installed from this checkout's
    pyproject.toml has the command (else the test is skipped, as serve's are). Once for the
    module: the command is a process of a second or more of CPU, and what a test reads is its
    own user's (alice's key, the long user's usage)."""
    assert CHATGATE.exists(), f"{CHATGATE} is missing from an up-to-date .venv"
    url = f"sqlite+aiosqlite:///{tmp_path_factory.mktemp('chatgate')}/chatgate.db"
    done = run([str(CHATGATE), "migrate"], url)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "migrated sqlite+aiosqlite:///" in done.stdout
    return url


def test_chatgate_and_the_old_script_paths_run_the_same_commands(database_url: str) -> None:
    """The commands that only print their help run beside the key's three, which run in
    turn (each needs the one before it): two processes at a time."""
    helps = {name: [str(ROOT / "scripts" / name), "--help"]
             for name in ("usage.py", "repair_messages.py", "replay_stream.py")}
    helps |= {"chatgate replay": [str(CHATGATE), "replay", "--help"],
              "chatgate serve": [str(CHATGATE), "serve", "--help"]}
    with ThreadPoolExecutor(1) as pool:
        helping = {name: pool.submit(run, command, database_url)
                   for name, command in helps.items()}
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
        helped = {name: job.result() for name, job in helping.items()}
    for script in ("usage.py", "repair_messages.py", "replay_stream.py"):
        assert helped[script].returncode == 0, script + helped[script].stderr
    replay = helped["chatgate replay"]
    assert replay.returncode == 0 and "export" in replay.stdout
    serve = helped["chatgate serve"]
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
