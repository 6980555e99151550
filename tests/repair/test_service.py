"""app.repair.service on both backends: scans, apply with backups, exact rollback,
filters."""

from __future__ import annotations

import datetime as dt
import re
import uuid

import pytest
from sqlalchemy import select, text, update

from app.repair import Resplit, ScanFilter
from app.repair import service as repair_runs
from app.store.db import Database
from app.store.models import Message, MessageRepair
from app.store.visibility import is_hidden
from tests.repair.rows import START, UNCLOSED, add_message, add_thread, load
from tests.repair.seed import snapshot


async def test_apply_fixes_backs_up_and_rollback_restores(db: Database) -> None:
    thread = await add_thread(db)
    broken = await add_message(db, thread, UNCLOSED, metadata={"tokens": 9})
    legacy = await add_message(db, thread, "[AUTONOMOUS_FOLLOWUP: check_in] quiet?", role="user")
    clean = await add_message(db, thread, "  fine, with spaces  ")
    before = await snapshot(db)

    report = await repair_runs.apply_repairs(db)
    assert report.run_id and report.repaired == 2 and report.corrupt == 2

    fixed = await load(db, broken)
    assert fixed.content == "Aha, chápu..."
    assert fixed.meta == {"tokens": 9, "response_metadata": {"language": "cs"}}
    flagged = await load(db, legacy)
    assert (flagged.synthetic, flagged.trigger_type) == (True, "check_in")
    assert flagged.meta == {"synthetic": True, "trigger_type": "check_in",
                            "trigger_reason": "quiet?"}
    assert is_hidden(flagged)
    after = await snapshot(db)
    assert after[clean.hex] == before[clean.hex]

    async with db.transaction() as s:
        backups = (await s.execute(select(MessageRepair).order_by(MessageRepair.rule))).scalars()
        by_rule = {b.rule: b for b in backups}
    assert set(by_rule) == {"legacy_synthetic", "unclosed_metadata"}
    assert by_rule["unclosed_metadata"].old_content == UNCLOSED
    assert by_rule["unclosed_metadata"].new_content == "Aha, chápu..."
    assert {b.run_id for b in by_rule.values()} == {report.run_id}

    rolled = await repair_runs.rollback_run(db, report.run_id)
    assert (rolled.restored, rolled.conflicts) == (2, [])
    assert await snapshot(db) == before
    again = await repair_runs.rollback_run(db, report.run_id)
    assert (again.restored, again.already_rolled_back) == (0, 2)


async def test_rollback_restores_foreign_json_text_byte_for_byte(db: Database) -> None:
    thread = await add_thread(db)
    broken = await add_message(db, thread, UNCLOSED)
    raw = '{"tokens":9,"ratio":1.50, "big":1e400}' if db.backend == "sqlite" else \
        '{"tokens": 9, "ratio": 1.50, "big": 1e400}'
    async with db.transaction() as s:
        await s.execute(text("UPDATE messages SET metadata = :raw"), {"raw": raw})
    before = await snapshot(db)
    report = await repair_runs.apply_repairs(db)
    assert report.repaired == 1 and report.run_id
    assert await snapshot(db) != before
    await repair_runs.rollback_run(db, report.run_id)
    assert await snapshot(db) == before
    assert (await load(db, broken)).content == UNCLOSED


async def test_second_apply_finds_nothing(db: Database) -> None:
    thread = await add_thread(db)
    for content in (UNCLOSED, '<!-- MSG_CONTEXT: {"h": []} -->Hi', "Use <!-- carefully"):
        await add_message(db, thread, content)
    first = await repair_runs.apply_repairs(db)
    second = await repair_runs.apply_repairs(db)
    assert (first.repaired, second.repaired, second.corrupt) == (2, 0, 0)
    assert second.notices == {"unclosed_comment": 1}  # reported every time, never rewritten


async def test_streaming_rows_belong_to_the_live_turn(db: Database) -> None:
    thread = await add_thread(db)
    live = await add_message(db, thread, UNCLOSED, status="streaming")
    report = await repair_runs.apply_repairs(db)
    assert report.corrupt == 0
    assert (await load(db, live)).content == UNCLOSED


@pytest.mark.parametrize("batch_size", [1, 3, 500])
async def test_batches_cover_every_row_once(db: Database, batch_size: int) -> None:
    thread = await add_thread(db)
    ids = {await add_message(db, thread, f"{i} {UNCLOSED}") for i in range(7)}
    for i in range(5):
        await add_message(db, thread, f"clean {i}")
    seen: list[int] = []
    report = await repair_runs.scan_messages(db, batch_size=batch_size, on_batch=seen.append)
    assert {uuid.UUID(f.message_id) for f in report.findings} == ids
    assert report.corrupt == 7 and sum(seen) == report.scanned == 7
    assert report.batches == -(-7 // batch_size)


async def test_filters_thread_user_since(db: Database) -> None:
    a = await add_thread(db, "alice")
    b = await add_thread(db, "bob")
    old = await add_message(db, a, UNCLOSED, at=START)
    new = await add_message(db, a, UNCLOSED, at=START + dt.timedelta(days=2))
    bobs = await add_message(db, b, UNCLOSED, user_id="bob", at=START + dt.timedelta(days=2))

    async def found(flt: ScanFilter) -> set[uuid.UUID]:
        report = await repair_runs.scan_messages(db, flt)
        return {uuid.UUID(f.message_id) for f in report.findings}

    assert await found(ScanFilter()) == {old, new, bobs}
    assert await found(ScanFilter(thread_id=a)) == {old, new}
    assert await found(ScanFilter(user_id="bob")) == {bobs}
    assert await found(ScanFilter(since=START + dt.timedelta(days=1))) == {new, bobs}
    applied = await repair_runs.apply_repairs(db, ScanFilter(user_id="alice"))
    assert applied.repaired == 2
    assert (await load(db, bobs)).content == UNCLOSED


async def test_rollback_leaves_rows_changed_since_the_repair(db: Database) -> None:
    thread = await add_thread(db)
    first = await add_message(db, thread, UNCLOSED)
    second = await add_message(db, thread, UNCLOSED)
    report = await repair_runs.apply_repairs(db)
    assert report.run_id
    async with db.transaction() as s:
        await s.execute(update(Message).where(Message.id == first).values(content="edited"))
    rolled = await repair_runs.rollback_run(db, report.run_id)
    assert (rolled.restored, rolled.conflicts) == (1, [str(first)])
    assert (await load(db, first)).content == "edited"
    assert (await load(db, second)).content == UNCLOSED


async def test_unknown_run_id_is_an_error(db: Database) -> None:
    with pytest.raises(repair_runs.UnknownRun):
        await repair_runs.rollback_run(db, "no-such-run")


async def test_extracted_metadata_with_nul_is_sanitised(db: Database) -> None:
    thread = await add_thread(db)
    message_id = await add_message(db, thread, 'x <!-- METADATA: {"a": "b\\u0000c"} -->')
    report = await repair_runs.apply_repairs(db)
    assert report.repaired == 1
    fixed = await load(db, message_id)
    assert fixed.content == "x"
    assert fixed.meta["response_metadata"] == {"a": "bc"}
    assert fixed.meta["sanitized"] == {"nul_removed": 1}


@pytest.mark.parametrize("backend", ["sqlite"])  # PostgreSQL text cannot hold NUL
async def test_a_nul_inside_a_marker_start_does_not_hide_the_row(db: Database) -> None:
    """Only SQLite can hold the NUL; the scan must read such a row, as the rules would."""
    thread = await add_thread(db)
    hidden = await add_message(db, thread, '<!-\x00- METADATA: {"language": "cs"}Aha')
    report = await repair_runs.apply_repairs(db)
    assert [uuid.UUID(f.message_id) for f in report.findings] == [hidden]
    fixed = await load(db, hidden)
    assert fixed.content == "Aha" and fixed.meta["response_metadata"] == {"language": "cs"}


async def test_a_users_own_legacy_looking_words_are_not_a_legacy_prompt(db: Database) -> None:
    """This gateway stores such a message with `synthetic: false`: no repair flags it."""
    thread = await add_thread(db)
    real = await add_message(db, thread, "[AUTONOMOUS_FOLLOWUP: check_in] is that a thing?",
                             role="user", metadata={"synthetic": False})
    report = await repair_runs.apply_repairs(db)
    assert report.corrupt == 0
    assert not is_hidden(await load(db, real))


async def test_a_failing_batch_is_rolled_back_whole_and_earlier_batches_stay(
    db: Database, backend: str
) -> None:
    """One transaction per batch: the batch whose write fails changes nothing, the batches
    before it stay applied under the run id and roll back like any run."""
    thread = await add_thread(db)
    ids = sorted([await add_message(db, thread, f"{i} {UNCLOSED}") for i in range(3)])
    before = await snapshot(db)
    stored = [(await load(db, i)).content for i in ids]
    await _refuse_updates_of(db, backend, stored[-1])  # batches go in id order: the last one
    try:
        with pytest.raises(Exception, match="refused"):
            await repair_runs.apply_repairs(db, batch_size=1, run_id="run-with-a-bad-batch")
        now = [(await load(db, i)).content for i in ids]
        assert now == [content.split("<!--")[0] + "Aha, chápu..." for content in stored[:2]] + [
            stored[-1]]
        rolled = await repair_runs.rollback_run(db, "run-with-a-bad-batch")
        assert (rolled.restored, rolled.conflicts) == (2, [])
        assert await snapshot(db) == before
    finally:
        await _refuse_updates_of(db, backend, None)


async def _refuse_updates_of(db: Database, backend: str, content: str | None) -> None:
    """A trigger failing any update of the row holding `content`; None drops it."""
    if backend == "sqlite":
        statements = ["DROP TRIGGER IF EXISTS refuse_update"]
        if content is not None:
            statements.append(f"""CREATE TRIGGER refuse_update BEFORE UPDATE ON messages
                WHEN OLD.content = '{content}' BEGIN SELECT RAISE(ABORT, 'refused'); END""")
    else:
        statements = ["DROP TRIGGER IF EXISTS refuse_update ON messages",
                      "DROP FUNCTION IF EXISTS refuse_update()"]
        if content is not None:
            statements += [
                """CREATE FUNCTION refuse_update() RETURNS trigger AS $$
                   BEGIN RAISE EXCEPTION 'refused'; END $$ LANGUAGE plpgsql""",
                f"""CREATE TRIGGER refuse_update BEFORE UPDATE ON messages FOR EACH ROW
                    WHEN (OLD.content = '{content}') EXECUTE FUNCTION refuse_update()""",
            ]
    async with db.transaction() as s:
        for statement in statements:
            await s.execute(text(statement))


async def test_progress_counts_and_run_listing(db: Database) -> None:
    thread = await add_thread(db)
    for i in range(3):
        await add_message(db, thread, f"{i} {UNCLOSED}")
    await add_message(db, thread, "clean")
    assert await repair_runs.count_for_progress(db, ScanFilter()) == (4, 3)
    assert await repair_runs.count_for_progress(db, ScanFilter(user_id="bob")) == (0, 0)
    report = await repair_runs.apply_repairs(db, batch_size=2)
    assert (report.total, report.scanned, report.batches, report.repaired) == (4, 3, 2, 3)
    assert report.run_id is not None and re.fullmatch(r"\d{8}T\d{6}Z-[0-9a-f]{8}", report.run_id)
    runs = await repair_runs.list_runs(db)
    assert [(r.run_id, r.messages, r.rolled_back) for r in runs] == [(report.run_id, 3, 0)]
    with pytest.raises(ValueError, match="batch_size"):
        await repair_runs.scan_messages(db, batch_size=0)



async def test_a_resplit_moves_old_thinking_into_the_reasoning_and_rolls_back_exactly(
    db: Database,
) -> None:
    """Only when asked, only rows with no reasoning and a closed leading block, only before
    the --before moment; the rollback puts the text back and the reasoning to NULL."""
    thread = await add_thread(db)
    old = await add_message(db, thread, "<think>They said hi.</think>Hello!",
                            metadata={"tokens": 9})
    split = await add_message(db, thread, "<think>kept</think>as is", reasoning="earlier")
    unclosed = await add_message(db, thread, "<think>cut before it closed")
    plain = await add_message(db, thread, "Use <think>x</think> tags.")
    newer = await add_message(db, thread, "<think>new</think>row", at=START + dt.timedelta(days=2))
    before = await snapshot(db)

    assert (await repair_runs.apply_repairs(db)).repaired == 0  # not asked: today's repairs
    assert await snapshot(db) == before

    resplit = Resplit()
    flt = ScanFilter(before=START + dt.timedelta(days=1))
    scanned = await repair_runs.scan_messages(db, flt, resplit=resplit)
    assert (scanned.corrupt, dict(scanned.by_rule)) == (1, {"reasoning_split": 1})
    assert scanned.samples[0].to_json()["reasoning_after"] == "They said hi."
    assert await snapshot(db) == before  # a dry run writes nothing

    report = await repair_runs.apply_repairs(db, flt, resplit=resplit)
    assert report.repaired == 1 and report.run_id
    moved = await load(db, old)
    assert (moved.content, moved.reasoning, moved.reasoning_ms) == (
        "Hello!", "They said hi.", None)
    assert moved.meta == {"tokens": 9}
    after = await snapshot(db)
    assert {key for key in before if before[key] != after[key]} == {old.hex}
    assert all(after[i.hex] == before[i.hex] for i in (split, unclosed, plain, newer))
    assert (await repair_runs.apply_repairs(db, flt, resplit=resplit)).repaired == 0

    rolled = await repair_runs.rollback_run(db, report.run_id)
    assert (rolled.restored, rolled.conflicts) == (1, [])
    assert await snapshot(db) == before
