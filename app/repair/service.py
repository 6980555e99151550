"""Repair runs: a dry-run scan, an apply, a rollback, over the whole table or a filtered part.

A run walks the candidate rows batch by batch (keyset pagination in app.repair.repository), hands
each row to the pure rules (app.repair) and, when applying, writes the planned fixes with
their backups. Each batch reads its rows and writes their fixes in one transaction (rows
locked with FOR UPDATE on PostgreSQL; SQLite's BEGIN IMMEDIATE holds the write lock), so a row
changed by the gateway between a dry run and `--apply` is judged on what it holds now, and a
failing batch is rolled back whole while the batches before it stay applied under the run id.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Literal

from app.core.clock import utcnow
from app.repair import (
    RepairPlan,
    RepairReport,
    Resplit,
    RollbackReport,
    ScanFilter,
    diagnose,
    plan_repair,
)
from app.repair import repository as repairs
from app.repair.repository import RunBackup, RunSummary
from app.store.db import Database

DEFAULT_BATCH_SIZE = 500

Progress = Callable[[int], None]
"""Called after each batch with the number of rows it read."""


class UnknownRun(LookupError):
    """No repair was recorded under that run id."""


def new_run_id() -> str:
    """A run id: sortable by time, unique, short enough to type."""
    return f"{utcnow():%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:8]}"


async def count_for_progress(db: Database, flt: ScanFilter, resplit: Resplit | None = None
                             ) -> tuple[int, int]:
    """(messages matching the filter, candidates among them): a progress bar's total."""
    async with db.transaction() as s:
        return await repairs.count_messages(s, flt, resplit)


async def scan_messages(
    db: Database, flt: ScanFilter | None = None, *, batch_size: int = DEFAULT_BATCH_SIZE,
    on_batch: Progress | None = None, max_samples: int = 5, resplit: Resplit | None = None,
) -> RepairReport:
    """Dry run: every finding and the planned fixes, nothing written. `resplit` also moves
    the thinking of answers stored before the reasoning split (rule `reasoning_split`)."""
    return await _run(db, flt or ScanFilter(), "scan", batch_size, on_batch, max_samples,
                      resplit=resplit)


async def apply_repairs(
    db: Database, flt: ScanFilter | None = None, *, batch_size: int = DEFAULT_BATCH_SIZE,
    on_batch: Progress | None = None, max_samples: int = 5, run_id: str | None = None,
    resplit: Resplit | None = None,
) -> RepairReport:
    """Fix every corrupt row, one transaction per batch, each change backed up under one run
    id (report.run_id). A batch that fails is rolled back whole; batches before it stay
    applied and are undone with rollback_run(run_id)."""
    return await _run(
        db, flt or ScanFilter(), "apply", batch_size, on_batch, max_samples,
        run_id or new_run_id(), resplit=resplit,
    )


async def _run(
    db: Database, flt: ScanFilter, mode: Literal["scan", "apply"], batch_size: int,
    on_batch: Progress | None, max_samples: int, run_id: str | None = None, *,
    resplit: Resplit | None = None,
) -> RepairReport:
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    report = RepairReport(mode=mode, max_samples=max_samples, run_id=run_id)
    started = time.perf_counter()
    report.total, _ = await count_for_progress(db, flt, resplit)
    await _run_batches(db, flt, report, batch_size, on_batch, apply=mode == "apply",
                       resplit=resplit)
    report.seconds = time.perf_counter() - started
    return report


async def _run_batches(
    db: Database, flt: ScanFilter, report: RepairReport, batch_size: int,
    on_batch: Progress | None, *, apply: bool, resplit: Resplit | None,
) -> None:
    after: uuid.UUID | None = None
    while True:
        async with db.transaction() as s:
            rows = await repairs.candidate_batch(s, flt, after, batch_size, lock=apply,
                                                 resplit=resplit)
            plans: list[RepairPlan] = []
            for message in rows:
                diagnosis = diagnose(message, resplit)
                plan = plan_repair(message, diagnosis)
                report.record(message, diagnosis, plan)
                if plan is not None:
                    plans.append(plan)
            if apply and report.run_id is not None:
                report.repaired += await repairs.write_repairs(s, report.run_id, plans)
        if not rows:
            return
        report.scanned += len(rows)
        report.batches += 1
        after = rows[-1].id
        if on_batch is not None:
            on_batch(len(rows))
        if len(rows) < batch_size:
            return


def _changed_since_repair(backup: RunBackup) -> bool:
    """The message no longer holds what the repair wrote: someone changed it since."""
    return (backup.current_content != backup.new_content
            or backup.current_metadata != backup.new_metadata)


async def rollback_run(db: Database, run_id: str) -> RollbackReport:
    """Restore every message of a run exactly (content, metadata, synthetic columns), in one
    transaction. A message changed since the repair is left as it is and listed as a
    conflict: restoring it would destroy the newer change."""
    report = RollbackReport(run_id)
    started = time.perf_counter()
    async with db.transaction() as s:
        backups = await repairs.run_backups(s, run_id)
        if not backups:
            raise UnknownRun(f"no repairs recorded under run id {run_id!r}")
        restorable: list[RunBackup] = []
        for backup in backups:
            if backup.rolled_back_at is not None:
                report.already_rolled_back += 1
            elif _changed_since_repair(backup):
                report.conflicts.append(str(backup.message_id))
            else:
                restorable.append(backup)
        await repairs.restore(s, restorable)
        report.restored = len(restorable)
    report.seconds = time.perf_counter() - started
    return report


async def list_runs(db: Database) -> list[RunSummary]:
    """Every run, newest first."""
    async with db.transaction() as s:
        return await repairs.list_runs(s)
