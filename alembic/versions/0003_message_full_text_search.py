"""Full-text search over message content, for memory retrieval (app.followups.memory_repository).

PostgreSQL: a GIN expression index on to_tsvector('english', content).
SQLite: an FTS5 table `messages_fts` keyed by a map table `message_search(id, message_id)`,
kept in sync with `messages` by three triggers, and back-filled here. Frozen like every
migration; app.followups.memory_repository queries exactly these objects. A later SQLite batch
migration of `messages` drops these triggers with the old table: it must re-create them
(FTS_SQLITE_TRIGGERS).

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22 06:30:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

PG_CREATE_INDEX = (
    "CREATE INDEX ix_messages_content_fts ON messages "
    "USING gin (to_tsvector('english'::regconfig, content))"
)
PG_DROP_INDEX = "DROP INDEX IF EXISTS ix_messages_content_fts"

SQLITE_CREATE = (
    "CREATE TABLE message_search ("
    "id INTEGER PRIMARY KEY, message_id CHAR(32) NOT NULL UNIQUE)",
    "CREATE VIRTUAL TABLE messages_fts USING fts5("
    "content, tokenize = 'porter unicode61 remove_diacritics 2')",
)
FTS_SQLITE_TRIGGERS = (
    """CREATE TRIGGER trg_messages_fts_ai AFTER INSERT ON messages
    WHEN new.content <> '' BEGIN
        INSERT INTO message_search (message_id) VALUES (new.id);
        INSERT INTO messages_fts (rowid, content) VALUES (last_insert_rowid(), new.content);
    END""",
    """CREATE TRIGGER trg_messages_fts_au AFTER UPDATE OF content ON messages
    WHEN old.content IS NOT new.content BEGIN
        DELETE FROM messages_fts
            WHERE rowid = (SELECT id FROM message_search WHERE message_id = old.id);
        DELETE FROM message_search WHERE message_id = old.id;
        INSERT INTO message_search (message_id) SELECT new.id WHERE new.content <> '';
        INSERT INTO messages_fts (rowid, content)
            SELECT last_insert_rowid(), new.content WHERE new.content <> '';
    END""",
    """CREATE TRIGGER trg_messages_fts_ad AFTER DELETE ON messages BEGIN
        DELETE FROM messages_fts
            WHERE rowid = (SELECT id FROM message_search WHERE message_id = old.id);
        DELETE FROM message_search WHERE message_id = old.id;
    END""",
)
SQLITE_BACKFILL = (
    "INSERT INTO message_search (message_id) "
    "SELECT id FROM messages WHERE content <> '' ORDER BY created_at",
    "INSERT INTO messages_fts (rowid, content) "
    "SELECT s.id, m.content FROM message_search AS s JOIN messages AS m ON m.id = s.message_id",
)
SQLITE_DROP = (
    "DROP TRIGGER IF EXISTS trg_messages_fts_ai",
    "DROP TRIGGER IF EXISTS trg_messages_fts_au",
    "DROP TRIGGER IF EXISTS trg_messages_fts_ad",
    "DROP TABLE IF EXISTS messages_fts",
    "DROP TABLE IF EXISTS message_search",
)


def _dialect() -> str:
    return str(op.get_context().dialect.name)


def upgrade() -> None:
    if _dialect() == "postgresql":
        op.execute(PG_CREATE_INDEX)
        return
    for statement in (*SQLITE_CREATE, *SQLITE_BACKFILL, *FTS_SQLITE_TRIGGERS):
        op.execute(statement)


def downgrade() -> None:
    if _dialect() == "postgresql":
        op.execute(PG_DROP_INDEX)
        return
    for statement in SQLITE_DROP:
        op.execute(statement)
