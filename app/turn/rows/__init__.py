"""The turn's repository: every write of a turn's rows (its opening, its finish, the bill of
calls without a message), one implementation per database behind one interface (TurnRows).
`turn_rows(db)` is the only place that asks which database runs."""

from __future__ import annotations

from app.store.db import Database
from app.turn.rows.contract import FinishedRow, FinishHook, SweptAnswer, ThreadGuard, TurnRows
from app.turn.rows.messages import HistoryRow
from app.turn.rows.postgres import PostgresTurnRows
from app.turn.rows.shapes import (
    MAX_CONTENT_CHARS,
    CallOpening,
    DayBudget,
    Fork,
    Opened,
    OpeningRequest,
    Refused,
    turn_times,
)
from app.turn.rows.sqlite import SqliteTurnRows
from app.usage.repository import process_rollup_shard


def turn_rows(db: Database, rollup_shard: int | None = None) -> TurnRows:
    """The turn's repository on `db`, adding usage to the rollup's `rollup_shard` (this
    process's: app.usage.repository.process_rollup_shard)."""
    shard = process_rollup_shard() if rollup_shard is None else rollup_shard
    if db.backend == "sqlite":
        return SqliteTurnRows(db, shard)
    return PostgresTurnRows(db, shard)


__all__ = ["MAX_CONTENT_CHARS", "CallOpening", "DayBudget", "FinishHook", "FinishedRow", "Fork",
           "HistoryRow", "Opened",
           "OpeningRequest", "Refused", "SweptAnswer", "ThreadGuard", "TurnRows", "turn_rows",
           "turn_times"]
