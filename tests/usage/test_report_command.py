"""`scripts/usage.py report` as an operator runs it, on a real database (SQLite and
PostgreSQL): the same figures as the admin API, as a table, JSON or CSV."""

from __future__ import annotations

import csv
import io
import json
import subprocess

import pytest

from app.store.db import Database
from tests.support.scripts import run_script
from tests.usage import admin_seed
from tests.usage.admin_seed import DAY1, DAY3, expected


def report(database_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    # COLUMNS: rich wraps tables at 80 columns when not on a terminal
    return run_script("usage.py", "report", *args, "--database-url", database_url,
                      env={"COLUMNS": "200"})


RANGE = ("--from", DAY1.isoformat(), "--to", DAY3.isoformat())


async def test_report_by_user_json_csv_and_table(
    db: Database, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    await admin_seed.seed(db, monkeypatch)
    want = expected("user")

    as_json = report(database_url, *RANGE, "--by", "user", "--json")
    assert as_json.returncode == 0, as_json.stderr
    answer = json.loads(as_json.stdout)
    assert {r["user_id"]: r["total_tokens"] for r in answer["rows"]} == {
        user: n for (user,), n in want.tokens.items()}
    assert answer["rows"][0]["user_id"] == "alice"  # the top user first
    assert answer["page"]["next_offset"] is None  # every row, no page

    as_csv = report(database_url, *RANGE, "--by", "user", "--csv")
    rows = list(csv.DictReader(io.StringIO(as_csv.stdout)))
    assert [(r["user_id"], int(r["total_tokens"])) for r in rows] == [
        (r["user_id"], r["total_tokens"]) for r in answer["rows"]]

    table = report(database_url, *RANGE, "--by", "user")
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    alice = next(line for line in lines if "alice" in line)
    assert f"{want.tokens[('alice',)]:,}" in alice
    total = next(line for line in lines if line.strip("│ ").startswith("total")
                 and "," in line)
    assert f"{sum(want.tokens.values()):,}" in total
    assert "unknown" not in alice and "(+1 unpriced)" in total  # bob's local model
    assert any("rate_limited" in line and "7" in line for line in lines)


async def test_report_by_stage_and_day(
    db: Database, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    await admin_seed.seed(db, monkeypatch)
    stages = json.loads(report(database_url, *RANGE, "--by", "stage", "--json").stdout)
    assert {r["stage"]: r["llm_call_count"] for r in stages["rows"]} == {
        stage: n for (stage,), n in expected("stage").calls.items()}
    days = json.loads(report(database_url, *RANGE, "--json").stdout)
    assert [r["day"] for r in days["rows"]] == [d.isoformat() for d in admin_seed.DAYS]


@pytest.mark.parametrize(("args", "words"), [
    (("--by", "team"), "--by must be one of day, user, model, stage, not 'team'"),
    (("--json", "--csv"), "--json and --csv exclude each other"),
    (("--from", DAY3.isoformat(), "--to", DAY1.isoformat()), "'start' must not be after"),
])
async def test_bad_arguments_are_one_sentence_and_exit_2(
    database_url: str, args: tuple[str, ...], words: str
) -> None:
    base = list(RANGE) if "--from" not in args else []
    result = report(database_url, *base, *args)
    assert result.returncode == 2, result.stdout + result.stderr
    assert words in result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr


def test_help_shows_the_flags_as_flags() -> None:
    shown = run_script("usage.py", "report", "--help", env={"COLUMNS": "200"})
    assert shown.returncode == 0, shown.stderr
    lines = {word: next(line for line in shown.stdout.splitlines() if word in line)
             for word in ("--json", "--csv", "--by")}
    assert "<bool>" not in lines["--json"] + lines["--csv"]
    assert "day, user, model or stage" in lines["--by"]


def test_a_bad_database_url_is_one_sentence() -> None:
    result = run_script("usage.py", "report", *RANGE, "--database-url", "nonsense")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    assert len((result.stdout + result.stderr).strip().splitlines()) == 1
