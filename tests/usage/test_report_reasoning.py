"""The providers' reasoning tokens in every usage report: the admin report by model and by
stage (the stage's from llm_calls, where a call that reported none is NULL) and
`scripts/usage.py report`'s table, on SQLite and PostgreSQL."""

from __future__ import annotations

import json

import pytest

from app.store.db import Database
from tests.support.scripts import run_script
from tests.usage_accounting.workload import DAY1, DAY3, mixed_workload

RANGE = ("--from", DAY1.isoformat(), "--to", DAY3.isoformat())


def _report(database_url: str, *args: str) -> str:
    result = run_script("usage.py", "report", *RANGE, *args, "--database-url", database_url,
                        env={"COLUMNS": "200"})
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


async def test_reports_show_the_reasoning_tokens(
        db: Database, database_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    await mixed_workload(db, monkeypatch)  # 150 on alice's gpt-4o main call, 3 on bob's
    by_model = json.loads(_report(database_url, "--by", "model", "--json"))
    assert {r["model"]: r["reasoning_tokens"] for r in by_model["rows"]} == {
        "gpt-4o": 153, "gpt-4o-mini": 0, "local-llama": 0}
    assert by_model["totals"]["reasoning_tokens"] == 153
    by_stage = json.loads(_report(database_url, "--by", "stage", "--json"))
    assert {r["stage"]: r["reasoning_tokens"] for r in by_stage["rows"]} == {
        "main": 150, "summary": 3, "title": 0}
    table = _report(database_url, "--by", "model").splitlines()
    header = next(line for line in table if "reasoning" in line)
    assert header.index("completion") < header.index("reasoning")
    gpt4o = next(line for line in table if "gpt-4o " in line or "gpt-4o│" in line)
    assert "153" in gpt4o
