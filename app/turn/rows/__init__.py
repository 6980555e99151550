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
from app.usage.shards import RollupShards


def turn_rows(db: Database, rollup_shards: RollupShards | None = None) -> TurnRows:
    """The turn's repository on `db`, adding usage to the rollup's shards in turn (from the
    process's own start unless `rollup_shards` says: app.usage.shards)."""
    shards = RollupShards() if rollup_shards is None else rollup_shards
    if db.backend == "sqlite":
        return SqliteTurnRows(db, shards)
    return PostgresTurnRows(db, shards)


__all__ = ["MAX_CONTENT_CHARS", "CallOpening", "DayBudget", "FinishHook", "FinishedRow", "Fork",
           "HistoryRow", "Opened",
           "OpeningRequest", "Refused", "SweptAnswer", "ThreadGuard", "TurnRows", "turn_rows",
           "turn_times"]
