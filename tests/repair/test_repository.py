"""app.repair.repository, the repair queries, on both backends: the candidate condition and its
keyset batches, the counts, backed-up rewrites, the backups of a run, restoring, run listing.
The runs that combine them are tested in tests/repair/test_service.py."""

from __future__ import annotations

import uuid

from sqlalchemy import select, update

from app.repair import ScanFilter, plan_repair
from app.repair import repository as repairs
from app.repair import service as repair_runs
from app.repair.plan import RepairPlan
from app.store.db import Database
from app.store.models import Message, MessageRepair
from tests.repair.rows import UNCLOSED, add_message, add_thread, load
from tests.repair.seed import snapshot


async def _plans(db: Database) -> list[RepairPlan]:
    async with db.transaction() as s:
        rows = await repairs.candidate_batch(s, ScanFilter(), None, 100)
    return [plan for plan in map(plan_repair, rows) if plan is not None]


async def test_candidate_batches_are_keyset_pages_in_id_order(db: Database) -> None:
    thread = await add_thread(db)
    corrupt = {await add_message(db, thread, f"{i} {UNCLOSED}") for i in range(5)}
    await add_message(db, thread, "clean")
    await add_message(db, thread, UNCLOSED, status="streaming")  # a live turn's row
    legacy = await add_message(db, thread, "[AUTONOMOUS_FOLLOWUP: check_in] hi", role="user")
    pages: list[list[uuid.UUID]] = []
    after: uuid.UUID | None = None
    async with db.transaction() as s:
        while page := await repairs.candidate_batch(s, ScanFilter(), after, 2, lock=True):
            pages.append([row.id for row in page])
            after = page[-1].id
        assert await repairs.count_messages(s, ScanFilter()) == (8, 6)
        assert await repairs.count_messages(s, ScanFilter(user_id="bob")) == (0, 0)
    seen = [message_id for page in pages for message_id in page]
    assert [len(page) for page in pages] == [2, 2, 2]
    assert seen == sorted(seen) and set(seen) == corrupt | {legacy}


async def test_write_repairs_backs_up_the_stored_row_and_rewrites_it(db: Database) -> None:
    thread = await add_thread(db)
    broken = await add_message(db, thread, UNCLOSED, metadata={"tokens": 9})
    before = await snapshot(db)
    plans = await _plans(db)
    async with db.transaction() as s:
        assert await repairs.write_repairs(s, "run-1", plans) == 1
        assert await repairs.write_repairs(s, "run-1", []) == 0
    fixed = await load(db, broken)
    assert (fixed.content, fixed.meta) == (
        "Aha, chápu...", {"tokens": 9, "response_metadata": {"language": "cs"}})
    async with db.transaction() as s:
        [backup] = (await s.execute(select(MessageRepair))).scalars()
    assert (backup.run_id, backup.message_id, backup.rule) == (
        "run-1", broken, "unclosed_metadata")
    assert (backup.old_content, backup.old_metadata) == (UNCLOSED, {"tokens": 9})
    assert (backup.new_content, backup.rolled_back_at) == ("Aha, chápu...", None)

    async with db.transaction() as s:
        [found] = await repairs.run_backups(s, "run-1")
        assert await repairs.run_backups(s, "no-such-run") == []
        assert (found.message_id, found.current_content) == (broken, "Aha, chápu...")
        assert found.current_metadata == found.new_metadata
        await repairs.restore(s, [found])
    assert await snapshot(db) == before
    async with db.transaction() as s:
        [restored] = await repairs.run_backups(s, "run-1")
        runs = await repairs.list_runs(s)
    assert restored.rolled_back_at is not None
    assert [(r.run_id, r.messages, r.rolled_back) for r in runs] == [("run-1", 1, 1)]


async def test_run_backups_show_the_message_as_it_is_now(db: Database) -> None:
    thread = await add_thread(db)
    first = await add_message(db, thread, UNCLOSED)
    await add_message(db, thread, UNCLOSED)
    plans = await _plans(db)
    async with db.transaction() as s:
        await repairs.write_repairs(s, "run-2", plans)
        await s.execute(update(Message).where(Message.id == first).values(content="edited"))
    async with db.transaction() as s:
        backups = await repairs.run_backups(s, "run-2")
    assert [b.message_id for b in backups] == sorted(b.message_id for b in backups)
    assert {b.message_id: b.current_content for b in backups}[first] == "edited"


async def test_restore_unflags_a_legacy_prompt(db: Database) -> None:
    thread = await add_thread(db)
    legacy = await add_message(db, thread, "[AUTONOMOUS_FOLLOWUP: check_in] hi", role="user")
    plans = await _plans(db)
    async with db.transaction() as s:
        await repairs.write_repairs(s, "run-3", plans)
    flagged = await load(db, legacy)
    assert (flagged.synthetic, flagged.trigger_type) == (True, "check_in")
    async with db.transaction() as s:
        await repairs.restore(s, await repairs.run_backups(s, "run-3"))
    restored = await load(db, legacy)
    assert (restored.synthetic, restored.trigger_type, restored.meta) == (False, None, {})


async def test_list_runs(db: Database) -> None:
    thread = await add_thread(db)
    await add_message(db, thread, UNCLOSED)
    report = await repair_runs.apply_repairs(db)
    async with db.transaction() as s:
        runs = await repairs.list_runs(s)
    assert [(r.run_id, r.messages, r.rolled_back) for r in runs] == [(report.run_id, 1, 0)]
