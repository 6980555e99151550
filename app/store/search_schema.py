"""The full-text search's own schema objects, which the models do not describe (its migration
makes them): their names, for the search's statements and for alembic's comparison, which
skips them."""

from __future__ import annotations

FTS_CONFIG = "english"
PG_INDEX = "ix_messages_content_fts"
SQLITE_FTS_TABLE = "messages_fts"
SQLITE_MAP_TABLE = "message_search"
#: Reflected schema objects the models do not describe (alembic comparison skips them).
SEARCH_SCHEMA_PREFIXES = (PG_INDEX, SQLITE_FTS_TABLE, SQLITE_MAP_TABLE, "trg_messages_fts_")


def is_search_schema_object(name: str | None) -> bool:
    """A table, index or trigger of the full-text search (not in the models on purpose)."""
    return bool(name) and any(str(name).startswith(p) for p in SEARCH_SCHEMA_PREFIXES)
