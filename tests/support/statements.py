"""What a database ran while a block ran, for tests that count a path's statements (each is
a round trip to PostgreSQL) or check they come out of SQLAlchemy's compiled cache."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine.interfaces import CacheStats

from app.store.db import Database


@contextmanager
def recorded_statements(db: Database) -> Iterator[list[tuple[str, bool]]]:
    """Each statement run while the block runs: its first word, and whether it came out of
    SQLAlchemy's compiled cache."""
    statements: list[tuple[str, bool]] = []

    def note(_conn: Any, _cursor: Any, statement: str, _params: Any, context: Any,
             _many: bool) -> None:
        statements.append((statement.split()[0], context.cache_hit == CacheStats.CACHE_HIT))

    event.listen(db.engine.sync_engine, "before_cursor_execute", note)
    try:
        yield statements
    finally:
        event.remove(db.engine.sync_engine, "before_cursor_execute", note)
