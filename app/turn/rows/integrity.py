"""Start-up check: synthetic metadata survives a round trip through the real database.

If a column type, a driver, a JSON serialiser or a trigger lost or altered `synthetic`,
`trigger_type` or `trigger_reason`, follow-up prompts would leak into users' histories. The
check opens a turn with a synthetic message in a new thread, as the follow-up worker does,
inside a transaction that is always rolled back, reads them back with fresh queries, and
refuses to start (IntegrityCheckFailed) on any difference.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select

from app.observe.logging import get_logger
from app.store.db import Database
from app.store.errors import IntegrityCheckFailed
from app.store.models import Message
from app.store.visibility import visible_sql
from app.threads.repository import create_thread
from app.turn.rows import Opened, OpeningRequest, turn_rows

CHECK_USER = "__chatgate_integrity_check__"
CHECK_TRIGGER_TYPE = "check_in"
# Non-ASCII, quotes and a backslash: what a careless serialiser would mangle.
CHECK_TRIGGER_REASON = 'integrity check: "quoted" \\ naïve 🙂'

log = get_logger("store.integrity")


def _problems(row: Any) -> list[str]:
    problems: list[str] = []
    if row is None:
        return ["the synthetic message could not be read back"]
    synthetic, trigger_type, metadata, visible_count = row
    if synthetic is not True:
        problems.append(f"column synthetic is {synthetic!r}, expected True")
    if trigger_type != CHECK_TRIGGER_TYPE:
        problems.append(f"column trigger_type is {trigger_type!r}")
    if not isinstance(metadata, dict):
        return [*problems, f"metadata is {metadata!r}, expected an object"]
    if metadata.get("synthetic") is not True:
        problems.append(f"metadata.synthetic is {metadata.get('synthetic')!r}, expected true")
    if metadata.get("trigger_type") != CHECK_TRIGGER_TYPE:
        problems.append(f"metadata.trigger_type is {metadata.get('trigger_type')!r}")
    if metadata.get("trigger_reason") != CHECK_TRIGGER_REASON:
        problems.append(f"metadata.trigger_reason is {metadata.get('trigger_reason')!r}")
    if visible_count:
        problems.append("the synthetic message is visible in history")
    return problems


async def check_synthetic_roundtrip(db: Database) -> None:
    """Raise IntegrityCheckFailed (after logging an ERROR) when synthetic metadata is altered."""
    async with db.sessionmaker() as session:
        await session.begin()
        try:
            thread = await create_thread(session, CHECK_USER, "integrity check")
            opened = await turn_rows(db).open_in(session, OpeningRequest(
                CHECK_USER, thread.id, "integrity check", synthetic=True,
                trigger_type=CHECK_TRIGGER_TYPE, trigger_reason=CHECK_TRIGGER_REASON))
            if not isinstance(opened, Opened) or opened.user is None:
                raise IntegrityCheckFailed("the check's turn could not be opened")
            message = opened.user
            visible = (
                select(func.count(Message.id))
                .where(Message.id == message.id, visible_sql())
                .scalar_subquery()
            )
            result = await session.execute(
                select(Message.synthetic, Message.trigger_type, Message.meta, visible)
                .where(Message.id == message.id)
            )
            problems = _problems(result.one_or_none())
        finally:
            await session.rollback()
    if problems:
        log.error("synthetic_roundtrip_failed", backend=db.backend, problems=problems)
        raise IntegrityCheckFailed("; ".join(problems))
    log.info("synthetic_roundtrip_ok", backend=db.backend)
