"""`repair_messages.py --reasoning-format` through the CLI, on both backends: a dry run by
default, `fix --apply` moves the thinking, `--rollback` undoes it; a bad format or tag is one
sentence and exit 2."""

from __future__ import annotations

import json

import pytest

from app.store.db import Database
from tests.repair.rows import add_message, add_thread, load
from tests.repair.seed import snapshot
from tests.repair.test_seeded_cycle import cli


async def test_the_cli_resplits_on_request_and_rolls_back(db: Database, database_url: str) -> None:
    thread = await add_thread(db)
    old = await add_message(db, thread, "<think>weigh it</think>Yes.")
    original = await snapshot(db)

    assert cli(database_url, "scan", "--check").returncode == 0  # off by default
    check = cli(database_url, "--check", "--json", "--reasoning-format", "think")
    assert check.returncode == 1, check.stderr
    assert json.loads(check.stdout)["by_rule"] == {"reasoning_split": 1}
    dry = cli(database_url, "fix", "--reasoning-format", "think", "--samples", "1")
    assert dry.returncode == 0 and "reasoning: weigh it" in dry.stdout, dry.stderr
    assert await snapshot(db) == original

    applied = cli(database_url, "fix", "--apply", "--json", "--reasoning-format", "think",
                  "--before", "2030-01-01")
    assert applied.returncode == 0, applied.stderr
    row = await load(db, old)
    assert (row.content, row.reasoning) == ("Yes.", "weigh it")
    rolled = cli(database_url, "--rollback", json.loads(applied.stdout)["run_id"])
    assert rolled.returncode == 0, rolled.stderr
    assert await snapshot(db) == original


@pytest.mark.parametrize("args", [
    ("--reasoning-format", "deep"), ("--reasoning-format", "think", "--reasoning-tag", "a b"),
    ("--before", "soon"),
])
def test_bad_resplit_options_exit_2(database_url: str, args: tuple[str, ...]) -> None:
    result = cli(database_url, "scan", *args)
    assert result.returncode == 2
    assert args[-2] in result.stderr or args[0] in result.stderr
