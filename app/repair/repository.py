"""The SQL of message repairs: keyset-paginated candidate rows, backed-up rewrites in
`message_repairs` under a run id, and restoring them. Queries only, in the caller's transaction.

Which rows are corrupt and what they become is app.repair (pure); the runs (one transaction
per batch, counting, when a rollback may restore a row) are app.repair.service.
Backups copy the old content and metadata inside the database (`UPDATE ... SET old_metadata =
(SELECT metadata ...)`), not through Python, so a rollback puts back the exact stored bytes
even where an old gateway serialised JSON differently. `updated_at` is left alone:
message_repairs is the audit trail, and restoring puts back every column a repair changed.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
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

from app.core.cleaning import clean_text
from app.core.clock import utcnow
from app.repair import RepairPlan, Resplit, ScanFilter, StoredMessage
from app.repair.rules import LEGACY_SYNTHETIC, REASONING_SPLIT
from app.store.models import Message, MessageRepair
from app.store.per_database import content_has_nul
from app.store.storable import clean_message
from app.store.types import JsonDocument
from app.store.visibility import is_legacy_synthetic_sql, metadata_synthetic_is_true

ID_CHUNK = 500  # ids per IN (...) list: far below both backends' bind-parameter limits

_MESSAGES: Table = Message.__table__  # type: ignore[assignment]
_REPAIRS: Table = MessageRepair.__table__  # type: ignore[assignment]


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
    if flt.before is not None:
        conditions.append(Message.created_at < flt.before)
    return conditions


def candidate_sql(resplit: Resplit | None = None) -> ColumnElement[bool]:
    """Rows some rule could match. Only narrows (every marker or comment rule needs `<!--`,
    the legacy rule needs the prefix and no flag, a re-split a closing tag and no reasoning
    yet, or an inline tool call's opener); the pure rules decide. Rows still `streaming`
    belong to a live turn and are never touched."""
    markers = or_(Message.content.contains("<!--"), content_has_nul(Message.content))
    if resplit is not None and resplit.reasoning_format != "none":
        markers = or_(markers, and_(Message.reasoning.is_(None),
                                    Message.content.contains(f"</{resplit.tag}>")))
    if resplit is not None and resplit.tool_format != "none":
        markers = or_(markers, Message.content.contains(f"<{resplit.tool_tag}>"))
    assistant = and_(Message.role == "assistant", markers)
    legacy_user = and_(
        Message.role == "user",
        is_legacy_synthetic_sql(),
        Message.synthetic == false(),
        Message.trigger_type.is_(None),
        not_(metadata_synthetic_is_true(Message.meta)),
    )
    return and_(Message.status != "streaming", or_(assistant, legacy_user))


def _batch_query(flt: ScanFilter, after: uuid.UUID | None, limit: int,
                 resplit: Resplit | None) -> Select[Any]:
    query = select(
        Message.id, Message.thread_id, Message.user_id, Message.role, Message.content,
        Message.meta, Message.synthetic, Message.trigger_type, Message.created_at,
        Message.reasoning,
    ).where(candidate_sql(resplit), *_filter_conditions(flt))
    if after is not None:
        query = query.where(Message.id > after)
    return query.order_by(Message.id).limit(limit)


def _stored(row: Row[Any]) -> StoredMessage:
    return StoredMessage(
        id=row.id, thread_id=row.thread_id, user_id=row.user_id, role=row.role,
        content=row.content, metadata=row.meta, synthetic=bool(row.synthetic),
        trigger_type=row.trigger_type, created_at=row.created_at, reasoning=row.reasoning,
    )


async def candidate_batch(
    s: AsyncSession, flt: ScanFilter, after: uuid.UUID | None, limit: int, *,
    lock: bool = False, resplit: Resplit | None = None,
) -> list[StoredMessage]:
    """The next `limit` candidate rows after `after` in id order (keyset pagination: stable
    and index-driven however far the scan has gone). `lock` takes row locks (PostgreSQL;
    SQLite's BEGIN IMMEDIATE already holds the write lock), so rows about to be rewritten
    are judged on what they hold now."""
    query = _batch_query(flt, after, limit, resplit)
    if lock:
        query = query.with_for_update(of=Message)
    return [_stored(row) for row in await s.execute(query)]


async def count_messages(s: AsyncSession, flt: ScanFilter, resplit: Resplit | None = None
                         ) -> tuple[int, int]:
    """(messages matching the filter, of which candidates): the progress bar's total."""
    conditions = _filter_conditions(flt)
    total = await s.scalar(select(func.count()).select_from(Message).where(*conditions))
    candidates = await s.scalar(
        select(func.count()).select_from(Message).where(candidate_sql(resplit), *conditions)
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
    moved = [{"b_id": w.plan.message.id, "b_reasoning": clean_text(w.plan.new_reasoning)}
             for w in writes if w.plan.new_reasoning is not None]
    if moved:  # a re-split: only rows with no reasoning, so a rollback puts back NULL
        await s.execute(
            update(_MESSAGES).where(_MESSAGES.c.id == bindparam("b_id"))
            .values(reasoning=bindparam("b_reasoning")), moved)
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


# ------------------------------------------------------------------------- restoring


@dataclass(frozen=True, slots=True)
class RunBackup:
    """One backup of a run beside the message as it is now: what rollback decides on."""

    id: uuid.UUID
    message_id: uuid.UUID
    rule: str
    new_content: str
    new_metadata: Any
    rolled_back_at: dt.datetime | None
    current_content: str
    current_metadata: Any


async def run_backups(s: AsyncSession, run_id: str) -> list[RunBackup]:
    """Every backup of a run whose message still exists, in message id order, the messages
    locked (PostgreSQL) until the caller's transaction ends."""
    rows = await s.execute(
        select(
            MessageRepair.id, MessageRepair.message_id, MessageRepair.rule,
            MessageRepair.new_content, MessageRepair.new_metadata,
            MessageRepair.rolled_back_at, Message.content, Message.meta,
        )
        .join(Message, Message.id == MessageRepair.message_id)
        .where(MessageRepair.run_id == run_id)
        .order_by(MessageRepair.message_id)
        .with_for_update()
    )
    return [RunBackup(*row) for row in rows]


async def restore(s: AsyncSession, backups: Sequence[RunBackup]) -> None:
    """Put back each backup's old content, metadata and (legacy_synthetic) columns and mark
    it rolled back. Restores unconditionally: which backups may be restored is the caller's
    decision (a message changed since its repair must not be)."""
    backup = _REPAIRS.alias("backup")
    now = utcnow()
    for chunk in _chunks(backups):
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
        # Likewise a re-split wrote the reasoning of rows that had none.
        resplit = [row.message_id for row in chunk if REASONING_SPLIT in row.rule.split(",")]
        if resplit:
            await s.execute(
                update(_MESSAGES).where(_MESSAGES.c.id.in_(resplit)).values(reasoning=None))
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
