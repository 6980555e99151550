"""messages.parent_id and messages.on_branch: a thread becomes a tree (Regenerate and Edit add
a version beside the message they replace; nothing is deleted) with one current branch.
Every existing thread becomes one branch: each message's parent is the message before it
in the thread's order (created_at, then id), and every message is on the branch.

Revision ID: 0016_message_tree
Revises: 0015_thread_origin
Create Date: 2026-11-28 15:10:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016_message_tree"
down_revision: str | Sequence[str] | None = "0015_thread_origin"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: Each message's parent: the thread's message just before it. A correlated subquery that
#: both databases run, each probe an index range (ix_messages_thread_created).
_BACKFILL = """
UPDATE messages SET parent_id = (
    SELECT earlier.id FROM messages AS earlier
    WHERE earlier.thread_id = messages.thread_id
      AND (earlier.created_at < messages.created_at
           OR (earlier.created_at = messages.created_at AND earlier.id < messages.id))
    ORDER BY earlier.created_at DESC, earlier.id DESC
    LIMIT 1)
"""


def upgrade() -> None:
    # plain ADD COLUMN on both databases: SQLite adds a nullable column, or one with a
    # constant default, without copying the table
    op.add_column("messages", sa.Column("parent_id", sa.Uuid(), nullable=True))
    op.add_column("messages", sa.Column("on_branch", sa.Boolean(), nullable=False,
                                        server_default=sa.true()))
    op.execute(_BACKFILL)


def downgrade() -> None:
    # plain DROP COLUMN (SQLite 3.35 and later): a batch copy of the table cannot copy its
    # generated `tokens` column
    op.drop_column("messages", "on_branch")
    op.drop_column("messages", "parent_id")
