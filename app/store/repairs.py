"""Repairs of stored messages: keyset-paginated scans, per-batch apply with backups in
`message_repairs` under one run id, and exact rollback by run id.

The rules live in app.repair (pure); this module only reads rows, hands them to the rules and
writes what they planned. Backups copy the old content and metadata inside the database
(`UPDATE ... SET old_metadata = (SELECT metadata ...)`), not through Python, so a rollback puts
back the exact stored bytes even where an old gateway serialised JSON differently.

Each apply batch reads its rows and writes their fixes in one transaction (rows locked with
FOR UPDATE on PostgreSQL; SQLite's BEGIN IMMEDIATE holds the write lock), so a row changed by
the gateway between a dry run and `--apply` is judged on what it holds now. `updated_at` is
left alone: message_repairs is the audit trail, and rollback restores every column it changed.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import (
    Boolean,
    ColumnElement,
    Row,
    Select,
    Table,
    and_,
    bindparam,
    false,
    func,
    not_,
    or_,
    select,
    update,
)
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement

from app.clock import utcnow
from app.repair import RepairReport, RollbackReport, ScanFilter, StoredMessage, diagnose
from app.repair.plan import RepairPlan, plan_repair
from app.repair.rules import LEGACY_SYNTHETIC
from app.store.db import Database
from app.store.errors import StoreError
from app.store.models import Message, MessageRepair
from app.store.sanitize import clean_message
from app.store.types import JsonDocument
from app.store.visibility import is_legacy_synthetic_sql, metadata_synthetic_is_true

DEFAULT_BATCH_SIZE = 500
ID_CHUNK = 500  # ids per IN (...) list: far below both backends' bind-parameter limits

Progress = Callable[[int], None]
"""Called after each batch with the number of rows it read."""

_MESSAGES: Table = Message.__table__  # type: ignore[assignment]
_REPAIRS: Table = MessageRepair.__table__  # type: ignore[assignment]


class UnknownRun(StoreError):
    """No repair was recorded under that run id."""


def new_run_id() -> str:
    """A run id: sortable by time, unique, short enough to type."""
    return f"{utcnow():%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:8]}"


def _chunks(items: Sequence[Any], size: int = ID_CHUNK) -> list[Sequence[Any]]:
    return [items[i:i + size] for i in range(0, len(items), size)]


# ------------------------------------------------------------------------- reading


def _filter_conditions(flt: ScanFilter) -> list[ColumnElement[bool]]:
    conditions: list[ColumnElement[bool]] = []
    if flt.thread_id is not None:
        conditions.append(Message.thread_id == flt.thread_id)
    if flt.user_id is not None:
        conditions.append(Message.user_id == flt.user_id)
    if flt.since is not None:
        conditions.append(Message.created_at >= flt.since)
    return conditions


class content_has_nul(FunctionElement[bool]):
    """The text holds a NUL. Only SQLite can store one; the rules drop it before they look,
    so `<!-\\0-` is a marker start the `<!--` test alone would never read."""

    type = Boolean()
    inherit_cache = True
    name = "content_has_nul"


@compiles(content_has_nul, "sqlite")
def _has_nul_sqlite(element: content_has_nul, compiler: SQLCompiler, **kw: Any) -> str:
    return f"instr({compiler.process(element.clauses, **kw)}, char(0)) > 0"


@compiles(content_has_nul, "postgresql")
def _has_nul_pg(element: content_has_nul, compiler: SQLCompiler, **kw: Any) -> str:
    return "false"  # PostgreSQL text cannot hold NUL


def candidate_sql() -> ColumnElement[bool]:
    """Rows some rule could match. Only narrows (every marker or comment rule needs `<!--`,
    the legacy rule needs the prefix and no flag); the pure rules decide. Rows still
    `streaming` belong to a live turn and are never touched."""
    assistant = and_(
        Message.role == "assistant",
        or_(Message.content.contains("<!--"), content_has_nul(Message.content)),
    )
    legacy_user = and_(
        Message.role == "user",
        is_legacy_synthetic_sql(),
        Message.synthetic == false(),
        Message.trigger_type.is_(None),
        not_(metadata_synthetic_is_true(Message.meta)),
    )
    return and_(Message.status != "streaming", or_(assistant, legacy_user))


def _batch_query(flt: ScanFilter, after: uuid.UUID | None, limit: int) -> Select[Any]:
    query = select(
        Message.id, Message.thread_id, Message.user_id, Message.role, Message.content,
        Message.meta, Message.synthetic, Message.trigger_type, Message.created_at,
    ).where(candidate_sql(), *_filter_conditions(flt))
    if after is not None:
        query = query.where(Message.id > after)
    return query.order_by(Message.id).limit(limit)


def _stored(row: Row[Any]) -> StoredMessage:
    return StoredMessage(
        id=row.id, thread_id=row.thread_id, user_id=row.user_id, role=row.role,
        content=row.content, metadata=row.meta, synthetic=bool(row.synthetic),
        trigger_type=row.trigger_type, created_at=row.created_at,
    )


async def candidate_batch(
    s: AsyncSession, flt: ScanFilter, after: uuid.UUID | None, limit: int, *,
    lock: bool = False,
) -> list[StoredMessage]:
    """The next `limit` candidate rows after `after` in id order (keyset pagination: stable
    and index-driven however far the scan has gone). `lock` takes row locks (PostgreSQL)."""
    query = _batch_query(flt, after, limit)
    if lock:
        query = query.with_for_update(of=Message)
    return [_stored(row) for row in await s.execute(query)]


async def count_messages(s: AsyncSession, flt: ScanFilter) -> tuple[int, int]:
    """(messages matching the filter, of which candidates): the progress bar's total."""
    conditions = _filter_conditions(flt)
    total = await s.scalar(select(func.count()).select_from(Message).where(*conditions))
    candidates = await s.scalar(
        select(func.count()).select_from(Message).where(candidate_sql(), *conditions)
    )
    return int(total or 0), int(candidates or 0)


# ------------------------------------------------------------------------- writing


@dataclass(frozen=True, slots=True)
class _Write:
    plan: RepairPlan
    content: str
    metadata: dict[str, Any]


def _sanitised(plan: RepairPlan) -> _Write:
    """Through the store's write-path cleaning like every other write (extracted metadata
    may carry "\\u0000", which PostgreSQL's JSONB refuses)."""
    content, metadata = clean_message(plan.new_content, plan.new_metadata)
    return _Write(plan, content, metadata)


async def write_repairs(s: AsyncSession, run_id: str, plans: Sequence[RepairPlan]) -> int:
    """Back up and rewrite the planned messages in the caller's transaction."""
    if not plans:
        return 0
    writes = [_sanitised(plan) for plan in plans]
    now = utcnow()
    backups: list[dict[str, Any]] = [
        {"id": uuid.uuid4(), "run_id": run_id, "message_id": w.plan.message.id,
         # old_* are placeholders here, overwritten by the database's own copy just below
         # (re-serialising the decoded JSON could fail, e.g. 1e400 decodes to inf).
         "rule": w.plan.rule, "old_content": "", "new_content": w.content,
         "old_metadata": {}, "new_metadata": w.metadata,
         "repaired_at": now, "rolled_back_at": None}
        for w in writes
    ]
    await s.execute(_REPAIRS.insert(), backups)
    await _copy_originals(s, [b["id"] for b in backups])
    await s.execute(
        update(_MESSAGES)
        .where(_MESSAGES.c.id == bindparam("b_id"))
        .values(
            content=bindparam("b_content"),
            metadata=bindparam("b_metadata", type_=JsonDocument),
            synthetic=bindparam("b_synthetic"),
            trigger_type=bindparam("b_trigger_type"),
        ),
        [
            {"b_id": w.plan.message.id, "b_content": w.content, "b_metadata": w.metadata,
             "b_synthetic": w.plan.synthetic, "b_trigger_type": w.plan.trigger_type}
            for w in writes
        ],
    )
    return len(writes)


async def _copy_originals(s: AsyncSession, repair_ids: list[uuid.UUID]) -> None:
    """old_content/old_metadata := the row's stored values, copied by the database itself."""
    source = _MESSAGES.alias("source")
    for chunk in _chunks(repair_ids):
        await s.execute(
            update(_REPAIRS)
            .where(_REPAIRS.c.id.in_(chunk))
            .values(
                old_content=select(source.c.content)
                .where(source.c.id == _REPAIRS.c.message_id).scalar_subquery(),
                old_metadata=select(source.c.metadata)
                .where(source.c.id == _REPAIRS.c.message_id).scalar_subquery(),
            )
        )


# ------------------------------------------------------------------------- runs


async def _run_batches(
    db: Database, flt: ScanFilter, report: RepairReport, batch_size: int,
    on_batch: Progress | None, *, apply: bool,
) -> None:
    after: uuid.UUID | None = None
    while True:
        async with db.transaction() as s:
            rows = await candidate_batch(s, flt, after, batch_size, lock=apply)
            plans: list[RepairPlan] = []
            for message in rows:
                diagnosis = diagnose(message)
                plan = plan_repair(message, diagnosis)
                report.record(message, diagnosis, plan)
                if plan is not None:
                    plans.append(plan)
            if apply and report.run_id is not None:
                report.repaired += await write_repairs(s, report.run_id, plans)
        if not rows:
            return
        report.scanned += len(rows)
        report.batches += 1
        after = rows[-1].id
        if on_batch is not None:
            on_batch(len(rows))
        if len(rows) < batch_size:
            return


async def count_for_progress(db: Database, flt: ScanFilter) -> tuple[int, int]:
    """(messages matching the filter, candidates among them)."""
    async with db.transaction() as s:
        return await count_messages(s, flt)


async def scan_messages(
    db: Database, flt: ScanFilter | None = None, *, batch_size: int = DEFAULT_BATCH_SIZE,
    on_batch: Progress | None = None, max_samples: int = 5,
) -> RepairReport:
    """Dry run: every finding and the planned fixes, nothing written."""
    return await _run(db, flt or ScanFilter(), "scan", batch_size, on_batch, max_samples)


async def apply_repairs(
    db: Database, flt: ScanFilter | None = None, *, batch_size: int = DEFAULT_BATCH_SIZE,
    on_batch: Progress | None = None, max_samples: int = 5, run_id: str | None = None,
) -> RepairReport:
    """Fix every corrupt row, one transaction per batch, each change backed up under one run
    id (report.run_id). A batch that fails is rolled back whole; batches before it stay
    applied and are undone with rollback_run(run_id)."""
    return await _run(
        db, flt or ScanFilter(), "apply", batch_size, on_batch, max_samples,
        run_id or new_run_id(),
    )


async def _run(
    db: Database, flt: ScanFilter, mode: Literal["scan", "apply"], batch_size: int,
    on_batch: Progress | None, max_samples: int, run_id: str | None = None,
) -> RepairReport:
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    report = RepairReport(mode=mode, max_samples=max_samples, run_id=run_id)
    started = time.perf_counter()
    report.total, _ = await count_for_progress(db, flt)
    await _run_batches(db, flt, report, batch_size, on_batch, apply=mode == "apply")
    report.seconds = time.perf_counter() - started
    return report


# ------------------------------------------------------------------------- rollback


async def rollback_run(db: Database, run_id: str) -> RollbackReport:
    """Restore every message of a run exactly (content, metadata, synthetic columns), in one
    transaction. A message changed since the repair is left as it is and listed as a
    conflict: restoring it would destroy the newer change."""
    report = RollbackReport(run_id)
    started = time.perf_counter()
    async with db.transaction() as s:
        rows = (await s.execute(
            select(
                MessageRepair.id, MessageRepair.message_id, MessageRepair.rule,
                MessageRepair.new_content, MessageRepair.new_metadata,
                MessageRepair.rolled_back_at, Message.content, Message.meta,
            )
            .join(Message, Message.id == MessageRepair.message_id)
            .where(MessageRepair.run_id == run_id)
            .order_by(MessageRepair.message_id)
            .with_for_update()
        )).all()
        if not rows:
            raise UnknownRun(f"no repairs recorded under run id {run_id!r}")
        restore: list[Row[Any]] = []
        for row in rows:
            if row.rolled_back_at is not None:
                report.already_rolled_back += 1
            elif row.content != row.new_content or row.meta != row.new_metadata:
                report.conflicts.append(str(row.message_id))
            else:
                restore.append(row)
        await _restore(s, restore)
        report.restored = len(restore)
    report.seconds = time.perf_counter() - started
    return report


async def _restore(s: AsyncSession, rows: list[Row[Any]]) -> None:
    backup = _REPAIRS.alias("backup")
    now = utcnow()
    for chunk in _chunks(rows):
        repair_ids = [row.id for row in chunk]
        message_ids = [row.message_id for row in chunk]
        mine = and_(backup.c.message_id == _MESSAGES.c.id, backup.c.id.in_(repair_ids))
        await s.execute(
            update(_MESSAGES)
            .where(_MESSAGES.c.id.in_(message_ids))
            .values(
                content=select(backup.c.old_content).where(mine).scalar_subquery(),
                metadata=select(backup.c.old_metadata).where(mine).scalar_subquery(),
            )
        )
        # Only legacy_synthetic repairs change the columns, and only on rows that had no flag
        # at all (rules.is_unflagged_legacy_prompt), so "no flag" is exactly what they had.
        legacy = [row.message_id for row in chunk if LEGACY_SYNTHETIC in row.rule.split(",")]
        if legacy:
            await s.execute(
                update(_MESSAGES).where(_MESSAGES.c.id.in_(legacy))
                .values(synthetic=False, trigger_type=None)
            )
        await s.execute(
            update(_REPAIRS).where(_REPAIRS.c.id.in_(repair_ids)).values(rolled_back_at=now)
        )


@dataclass(frozen=True, slots=True)
class RunSummary:
    """One repair run, as `repair_messages.py runs` lists it."""

    run_id: str
    messages: int
    rolled_back: int
    repaired_at: Any


async def list_runs(s: AsyncSession) -> list[RunSummary]:
    """Every run, newest first."""
    rows = await s.execute(
        select(
            MessageRepair.run_id, func.count(), func.count(MessageRepair.rolled_back_at),
            func.min(MessageRepair.repaired_at),
        ).group_by(MessageRepair.run_id).order_by(func.min(MessageRepair.repaired_at).desc())
    )
    return [RunSummary(r[0], int(r[1]), int(r[2]), r[3]) for r in rows]
