"""The `tool_call_split` repair: an answer a gateway from before the inline tool call format
stored with its calls as text is read again by the one split, only when asked, only for rows
without tool calls and with a call; the calls move into `metadata.tool_calls`; repairing twice
changes nothing; on both backends a run applies and rolls back exactly, and so does the CLI."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from app.repair import TOOL_CALL_SPLIT, Resplit, ScanFilter, diagnose, plan_repair
from app.repair import service as repair_runs
from app.repair.rules import CLEAN
from app.store.db import Database
from app.stream import strip_markers
from tests.repair.rows import add_message, add_thread, load
from tests.repair.seed import snapshot
from tests.repair.test_rules import message
from tests.repair.test_seeded_cycle import cli
from tests.stream.test_tools_conformance import CASES

HERMES = Resplit("none", tool_format="hermes")
#: Cases whose stored text (the marker filter's, thinking included: a gateway from before
#: both splits) still holds a call.
CALLING = [c for c in CASES if c["tool_format"] == "hermes" and c["tool_calls"]
           and "<think>" not in c["input"]]


def calls_of(metadata: dict[str, Any]) -> list[tuple[str, str]]:
    return [(c["function"]["name"], c["function"]["arguments"]) for c in metadata["tool_calls"]]


@pytest.mark.parametrize("case", CALLING, ids=[c["id"] for c in CALLING])
def test_stored_calls_move_into_the_rows_tool_calls_as_the_gateway_stores_them_today(
    case: dict[str, Any]
) -> None:
    stored = message(strip_markers(case["input"]).text, metadata={"tokens": 3})
    plan = plan_repair(stored, resplit=HERMES)
    assert plan is not None and TOOL_CALL_SPLIT in plan.rules, case["id"]
    assert plan.new_content == case["text"] and plan.new_reasoning is None
    assert calls_of(plan.new_metadata) == [(c["name"], c["arguments"])
                                           for c in case["tool_calls"]]
    assert all(c["id"].startswith("call_") and c["type"] == "function"
               for c in plan.new_metadata["tool_calls"])
    assert plan.new_metadata["tokens"] == 3
    again = dataclasses.replace(stored, content=plan.new_content, metadata=plan.new_metadata)
    assert plan_repair(again, resplit=HERMES) is None  # a second run finds nothing


def test_nothing_moves_unless_asked_or_when_there_is_no_call() -> None:
    stored = message('<tool_call>{"name": "f"}</tool_call>')
    assert diagnose(stored) == CLEAN and diagnose(stored, Resplit()) == CLEAN
    assert TOOL_CALL_SPLIT in diagnose(stored, HERMES).rules
    for text in ("Wrap calls in <tool_call> tags.", '<tool_call>{"arguments": {}}</tool_call>',
                 'On it. <tool_call>{"name": "f", "argu'):
        assert diagnose(message(text), HERMES) == CLEAN, text
    called = message('<tool_call>{"name": "f"}</tool_call>',
                     metadata={"tool_calls": [{"id": "call_1"}]})
    assert diagnose(called, HERMES) == CLEAN  # its calls are stored already


def test_thinking_and_calls_move_in_one_repair() -> None:
    stored = message('<think>weather first</think><tool_call>{"name": "f"}</tool_call>Ok.')
    plan = plan_repair(stored, resplit=Resplit("think", tool_format="hermes"))
    assert plan is not None and plan.rules == ("reasoning_split", TOOL_CALL_SPLIT)
    assert (plan.new_content, plan.new_reasoning, calls_of(plan.new_metadata)) == (
        "Ok.", "weather first", [("f", "{}")])


async def test_a_run_moves_the_calls_and_rolls_back_exactly(db: Database) -> None:
    thread = await add_thread(db)
    old = await add_message(db, thread, 'Checking.\n<tool_call>{"name": "get_weather", '
                            '"arguments": {"city": "Brno"}}</tool_call>', metadata={"t": 1})
    prose = await add_message(db, thread, "Wrap calls in <tool_call> tags.")
    before = await snapshot(db)
    assert (await repair_runs.apply_repairs(db)).repaired == 0  # not asked
    scanned = await repair_runs.scan_messages(db, ScanFilter(), resplit=HERMES)
    assert (scanned.corrupt, dict(scanned.by_rule)) == (1, {TOOL_CALL_SPLIT: 1})
    report = await repair_runs.apply_repairs(db, resplit=HERMES)
    assert report.repaired == 1 and report.run_id
    row = await load(db, old)
    assert row.content == "Checking." and row.meta["t"] == 1
    assert calls_of(row.meta) == [("get_weather", '{"city": "Brno"}')]
    after = await snapshot(db)
    assert after[prose.hex] == before[prose.hex]
    assert (await repair_runs.apply_repairs(db, resplit=HERMES)).repaired == 0
    rolled = await repair_runs.rollback_run(db, report.run_id)
    assert (rolled.restored, rolled.conflicts) == (1, [])
    assert await snapshot(db) == before


async def test_the_cli_moves_calls_on_request(db: Database, database_url: str) -> None:
    thread = await add_thread(db)
    old = await add_message(db, thread, '<tool_call>{"name": "f", "arguments": {}}</tool_call>')
    original = await snapshot(db)
    assert cli(database_url, "scan", "--check").returncode == 0  # off by default
    check = cli(database_url, "--check", "--json", "--tool-format", "hermes")
    assert check.returncode == 1, check.stderr
    assert json.loads(check.stdout)["by_rule"] == {TOOL_CALL_SPLIT: 1}
    applied = cli(database_url, "fix", "--apply", "--json", "--tool-format", "hermes")
    assert applied.returncode == 0, applied.stderr
    assert calls_of((await load(db, old)).meta) == [("f", "{}")]
    assert cli(database_url, "--rollback", json.loads(applied.stdout)["run_id"]).returncode == 0
    assert await snapshot(db) == original
    bad = cli(database_url, "scan", "--tool-format", "qwen")
    assert bad.returncode == 2 and "--tool-format" in bad.stderr
