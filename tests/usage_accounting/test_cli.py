"""scripts/usage.py as an operator runs it: its command line on a real database (run in
this process: tests/support/scripts.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from sqlalchemy import update

from app.store.db import Database
from app.store.models import UserTokenUsage
from tests.support.scripts import run_script
from tests.usage_accounting.workload import DAY1, DAY2, DAY3, mixed_workload, rollup_rows


def usage_cli(database_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    # COLUMNS: rich wraps tables at 80 columns when not on a terminal
    return run_script("usage.py", *args, "--database-url", database_url,
                      env={"COLUMNS": "200"})


async def test_verify_backfill_verify(
    db: Database, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    await mixed_workload(db, monkeypatch)
    good = await rollup_rows(db)

    clean = usage_cli(database_url, "verify")
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert "checked 3 day(s)" in clean.stdout
    assert "OK" in clean.stdout

    async with db.transaction() as s:
        await s.execute(update(UserTokenUsage)
                        .where(UserTokenUsage.user_id == "bob",
                               UserTokenUsage.period_start == DAY3)
                        .values(total_tokens=UserTokenUsage.total_tokens + 1000,
                                reasoning_tokens=0))
    tampered = usage_cli(database_url, "verify")
    assert tampered.returncode == 1, tampered.stdout + tampered.stderr
    assert "MISMATCH: 2 figure(s) differ" in tampered.stdout
    assert "bob" in tampered.stdout and "1275" in tampered.stdout and "275" in tampered.stdout
    assert "reasoning_tokens" in tampered.stdout  # the summary call's 3 lost
    # another day is still clean, and --day looks at that day only
    assert usage_cli(database_url, "verify", "--day", DAY2.isoformat()).returncode == 0
    assert usage_cli(database_url, "verify", "--day", DAY3.isoformat()).returncode == 1

    for _ in range(2):  # idempotent
        fixed = usage_cli(database_url, "backfill", "--from", DAY1.isoformat(),
                          "--to", DAY3.isoformat())
        assert fixed.returncode == 0, fixed.stdout + fixed.stderr
        assert "backfilled 3 day(s)" in fixed.stdout
        assert await rollup_rows(db) == good
    assert usage_cli(database_url, "verify").returncode == 0


async def test_verify_reports_messages_without_token_data(
    db: Database, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.usage_accounting.workload import at, finished_turn, new_thread

    thread = await new_thread(db, "erin")
    await finished_turn(db, monkeypatch, thread, at(DAY1), [], metadata={"legacy": True})
    await finished_turn(db, monkeypatch, thread, at(DAY1, 13), [], metadata={})
    result = usage_cli(database_url, "verify")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "without token data (unknown, not 0): 2" in result.stdout


@pytest.mark.parametrize("args", [
    ("verify", "--day", "yesterday"),
    ("backfill", "--from", "2026-11-22", "--to", "2026-11-01"),
    ("backfill", "--from", "2026-13-01", "--to", "2026-11-01"),
])
def test_bad_arguments_exit_2(args: tuple[str, ...], tmp_path: Path) -> None:
    result = usage_cli(f"sqlite+aiosqlite:///{tmp_path}/unused.db", *args)
    assert result.returncode == 2, result.stdout + result.stderr
