"""The operator's whole cycle on 10,000 seeded messages, on both backends, through the CLI:
--check 1 -> fix --apply -> --check 0 -> --rollback -> originals byte for byte -> apply again
-> apply once more finds nothing. Clean rows stay byte-identical throughout."""

from __future__ import annotations

import json
import subprocess

from app.repair import service as repair_runs
from app.store.db import Database
from app.stream.spec import HEADER
from tests.repair.seed import CORRUPT_KINDS, Seeded, seed, snapshot
from tests.support.scripts import run_script

MESSAGES = 10_000


def cli(database_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    # --database-url wins over the setting: a setting pointing nowhere proves it
    nowhere = "sqlite+aiosqlite:////nonexistent/not-used"
    return run_script("repair_messages.py", *args, "--database-url", database_url,
                      env={"CHATGATE_DATABASE_URL": nowhere})


def _changed(before: dict[str, tuple[object, ...]], after: dict[str, tuple[object, ...]],
             ) -> set[str]:
    assert before.keys() == after.keys()
    return {key for key in before if before[key] != after[key]}


async def test_seeded_cycle(db: Database, database_url: str) -> None:
    seeded: Seeded = await seed(db, MESSAGES)
    corrupt = {i.hex for i in seeded.corrupt_ids}
    assert len(seeded.kinds) == MESSAGES and set(seeded.kinds.values()) >= set(CORRUPT_KINDS)
    original = await snapshot(db)

    check = cli(database_url, "--check", "--json")
    assert check.returncode == 1, check.stderr
    report = json.loads(check.stdout)
    assert report["corrupt"] == len(corrupt)
    assert report["by_rule"] == dict(sorted(seeded.expected_by_rule().items()))
    assert report["notices"] == {"unclosed_comment": len(seeded.ids_of("stray_comment"))}
    assert await snapshot(db) == original  # a scan writes nothing

    applied = cli(database_url, "fix", "--apply", "--json")
    assert applied.returncode == 0, applied.stderr
    run_id = json.loads(applied.stdout)["run_id"]
    assert json.loads(applied.stdout)["repaired"] == len(corrupt)
    fixed = await snapshot(db)
    assert _changed(original, fixed) == corrupt  # every clean row byte-identical
    for key in corrupt:
        assert not HEADER.search(fixed[key][0])

    assert cli(database_url, "scan", "--check").returncode == 0

    rolled = cli(database_url, "--rollback", run_id)
    assert rolled.returncode == 0, rolled.stderr
    assert f"{len(corrupt)} restored" in " ".join(rolled.stdout.split())
    assert await snapshot(db) == original
    listed = cli(database_url, "runs", "--json")
    assert listed.returncode == 0, listed.stderr
    [run] = json.loads(listed.stdout)["runs"]
    assert (run["run_id"], run["messages"], run["rolled_back"]) == (
        run_id, len(corrupt), len(corrupt))

    again = await repair_runs.apply_repairs(db)
    assert again.repaired == len(corrupt) and again.run_id != run_id
    assert await snapshot(db) == fixed  # the same fix, byte for byte
    idle = await repair_runs.apply_repairs(db)
    assert (idle.repaired, idle.corrupt) == (0, 0)


def test_cli_dry_run_shows_rules_and_diffs(database_url: str) -> None:
    import asyncio

    async def prepare() -> None:
        db = Database(database_url)
        try:
            await seed(db, 200, threads=5)
        finally:
            await db.dispose()

    asyncio.run(prepare())
    result = cli(database_url, "fix", "--samples", "3")
    assert result.returncode == 0, result.stderr
    flat = " ".join(result.stdout.split())
    for rule in ("marker_header", "unclosed_metadata", "context_echo", "legacy_synthetic",
                 "unclosed_comment"):
        assert rule in flat
    assert "Before / after" in flat and "dry run: nothing written" in flat
    assert cli(database_url, "rollback", "no-such-run").returncode == 2
    assert cli(database_url, "scan", "--since", "yesterday").returncode == 2


def test_cli_refuses_options_before_a_command(database_url: str) -> None:
    """`--user bob fix --apply` would otherwise repair every user's rows, and `--check scan`
    would exit 0 over corrupt rows: an option before the command is an error, nothing runs."""
    import asyncio

    async def seeded_snapshot() -> dict[str, tuple[object, ...]]:
        db = Database(database_url)
        try:
            await seed(db, 50, threads=2)
            return await snapshot(db)
        finally:
            await db.dispose()

    async def current() -> dict[str, tuple[object, ...]]:
        db = Database(database_url)
        try:
            return await snapshot(db)
        finally:
            await db.dispose()

    before = asyncio.run(seeded_snapshot())
    for args in (("--user", "bob", "fix", "--apply"), ("--check", "scan"),
                 ("--apply", "fix")):
        result = cli(database_url, *args)
        assert result.returncode == 2, (args, result.stdout)
        assert "before the command" in " ".join(result.stderr.split())
    assert asyncio.run(current()) == before
    assert cli(database_url, "--check").returncode == 1  # the flag form alone still works
