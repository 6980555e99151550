"""The start-up round trip of synthetic metadata, on both backends."""

from __future__ import annotations

import pytest
import structlog
from sqlalchemy import func, select, text

from app.store import IntegrityCheckFailed
from app.store.db import Database
from app.store.models import Message, Thread
from app.turn.rows.integrity import check_synthetic_roundtrip
from tests.support.databases import metadata_key_dropping_trigger


async def _row_counts(db: Database) -> tuple[int, int]:
    async with db.transaction() as s:
        threads = await s.scalar(select(func.count()).select_from(Thread))
        messages = await s.scalar(select(func.count()).select_from(Message))
    return int(threads or 0), int(messages or 0)


async def test_roundtrip_passes_and_leaves_nothing_behind(db: Database) -> None:
    with structlog.testing.capture_logs() as logs:
        await check_synthetic_roundtrip(db)
    assert await _row_counts(db) == (0, 0)
    assert [entry["event"] for entry in logs] == ["synthetic_roundtrip_ok"]


async def test_lossy_database_refuses_to_start(db: Database, backend: str) -> None:
    async with db.transaction() as s:
        for statement in metadata_key_dropping_trigger(backend, "synthetic"):
            await s.execute(text(statement))
    with structlog.testing.capture_logs() as logs, pytest.raises(IntegrityCheckFailed) as failed:
        await check_synthetic_roundtrip(db)
    assert "metadata.synthetic is None" in str(failed.value)
    [error] = [entry for entry in logs if entry["log_level"] == "error"]
    assert error["event"] == "synthetic_roundtrip_failed"
    assert any("metadata.synthetic" in problem for problem in error["problems"])
    assert await _row_counts(db) == (0, 0)
