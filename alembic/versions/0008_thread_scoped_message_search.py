"""SQLite: the full-text index of messages holds each message's thread as a token, so memory
search matches within one thread instead of over every message of the database.

Revision 0003's `messages_fts` indexed content only: a thread's search read every match of
its terms in the whole database and dropped the other threads' afterwards, so its cost grew
with the database (with the search's plan of app.followups.memory_repository: a word found
in 10,000 of 20,000 messages, 25 ms a search before, 0.6 ms thread-scoped). `messages_fts` now has a
second column, `thread`: the message's thread id (CHAR(32) hex, as the messages table stores
it) followed by a `0`, so that the porter stemmer, which only strips suffixes of letters,
leaves it whole. The search matches `thread : "<id>0" AND content : (terms)`. The triggers
are re-created to fill it and the index is back-filled from `message_search`, whose ids stay
the rows' ids. PostgreSQL: no change (its GIN expression index is left to the planner beside
the thread index).

Frozen like every migration; app.followups.memory_repository queries exactly these objects. A
later SQLite batch migration of `messages` drops these triggers with the old table: it must re-
create them (FTS_SQLITE_TRIGGERS below).

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-25 23:30:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0008"
down_revision: str | Sequence[str] | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TOKENIZE = "tokenize = 'porter unicode61 remove_diacritics 2'"
DROP_TRIGGERS = (
    "DROP TRIGGER IF EXISTS trg_messages_fts_ai",
    "DROP TRIGGER IF EXISTS trg_messages_fts_au",
    "DROP TRIGGER IF EXISTS trg_messages_fts_ad",
)
FTS_SQLITE_TRIGGERS = (
    """CREATE TRIGGER trg_messages_fts_ai AFTER INSERT ON messages
    WHEN new.content <> '' BEGIN
        INSERT INTO message_search (message_id) VALUES (new.id);
        INSERT INTO messages_fts (rowid, content, thread)
            VALUES (last_insert_rowid(), new.content, new.thread_id || '0');
    END""",
    """CREATE TRIGGER trg_messages_fts_au AFTER UPDATE OF content ON messages
    WHEN old.content IS NOT new.content BEGIN
        DELETE FROM messages_fts
            WHERE rowid = (SELECT id FROM message_search WHERE message_id = old.id);
        DELETE FROM message_search WHERE message_id = old.id;
        INSERT INTO message_search (message_id) SELECT new.id WHERE new.content <> '';
        INSERT INTO messages_fts (rowid, content, thread)
            SELECT last_insert_rowid(), new.content, new.thread_id || '0'
            WHERE new.content <> '';
    END""",
    """CREATE TRIGGER trg_messages_fts_ad AFTER DELETE ON messages BEGIN
        DELETE FROM messages_fts
            WHERE rowid = (SELECT id FROM message_search WHERE message_id = old.id);
        DELETE FROM message_search WHERE message_id = old.id;
    END""",
)
UPGRADE = (
    *DROP_TRIGGERS,
    "DROP TABLE messages_fts",
    f"CREATE VIRTUAL TABLE messages_fts USING fts5(content, thread, {TOKENIZE})",
    "INSERT INTO messages_fts (rowid, content, thread) "
    "SELECT s.id, m.content, m.thread_id || '0' "
    "FROM message_search AS s JOIN messages AS m ON m.id = s.message_id",
    *FTS_SQLITE_TRIGGERS,
)
#: Revision 0003's index and triggers, as they were.
DOWNGRADE = (
    *DROP_TRIGGERS,
    "DROP TABLE messages_fts",
    f"CREATE VIRTUAL TABLE messages_fts USING fts5(content, {TOKENIZE})",
    "INSERT INTO messages_fts (rowid, content) "
    "SELECT s.id, m.content FROM message_search AS s JOIN messages AS m ON m.id = s.message_id",
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
    FTS_SQLITE_TRIGGERS[2],
)


def _is_sqlite() -> bool:
    return op.get_context().dialect.name == "sqlite"


def upgrade() -> None:
    if _is_sqlite():
        for statement in UPGRADE:
            op.execute(statement)


def downgrade() -> None:
    if _is_sqlite():
        for statement in DOWNGRADE:
            op.execute(statement)
