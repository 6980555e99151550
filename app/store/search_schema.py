"""The full-text search's own schema objects, which the models do not describe (its migration
makes them): their names, for alembic's comparison, which skips them, and the expressions
every search over the index is built from (the memory search, the thread list's search box), so
each reads the index the one way the migration made it."""

from __future__ import annotations

from typing import Any

from sqlalchemy import ColumnElement, FromClause, Join, column, func, literal_column, table

FTS_CONFIG = "english"
PG_INDEX = "ix_messages_content_fts"
SQLITE_FTS_TABLE = "messages_fts"
SQLITE_MAP_TABLE = "message_search"
#: Reflected schema objects the models do not describe (alembic comparison skips them).
SEARCH_SCHEMA_PREFIXES = (PG_INDEX, SQLITE_FTS_TABLE, SQLITE_MAP_TABLE, "trg_messages_fts_")


def is_search_schema_object(name: str | None) -> bool:
    """A table, index or trigger of the full-text search (not in the models on purpose)."""
    return bool(name) and any(str(name).startswith(p) for p in SEARCH_SCHEMA_PREFIXES)


def pg_config() -> ColumnElement[Any]:
    """PostgreSQL's text search configuration of the index, as a regconfig literal."""
    return literal_column(f"'{FTS_CONFIG}'::regconfig")


def pg_vector(content: ColumnElement[Any]) -> ColumnElement[Any]:
    """A message's tsvector as the index holds it: the indexed expression, exactly, or the
    planner would not use the index."""
    return func.to_tsvector(pg_config(), content)


_search_map = table(SQLITE_MAP_TABLE, column("id"), column("message_id"))
_fts = table(SQLITE_FTS_TABLE, column("rowid"))
#: The FTS5 table as the left side of `MATCH` (and `highlight()`'s first argument).
SQLITE_FTS: ColumnElement[Any] = literal_column(SQLITE_FTS_TABLE)


def sqlite_fts_join(messages: FromClause, message_id: ColumnElement[Any]) -> Join:
    """The messages joined to their FTS5 rows through the id map (FTS5 rowids are integers,
    message ids are UUIDs)."""
    return (messages.join(_search_map, _search_map.c.message_id == message_id)
            .join(_fts, _fts.c.rowid == _search_map.c.id))
