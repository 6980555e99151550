"""open_calls: the calls without a message while they run (an OpenAI-style call without a
thread), one row each, so that a user's stream cap counts them in every process as it counts
`streaming` answers, and a process's death does not lose their usage (`calls`, the calls so
far as the last checkpoint wrote them, which the dead-process sweep bills).

PostgreSQL: chatgate_lock_user_streams(namespace, user_id, except_id) (revision 0009) counts
the user's open calls with their streaming answers, the one row `except_id` names left out
of both (an opening's own new row, whichever table it is in). Frozen like every migration.

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-28 09:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0013"
down_revision: str | Sequence[str] | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COUNT_WITH_OPEN_CALLS = """
CREATE OR REPLACE FUNCTION chatgate_lock_user_streams(
    p_namespace integer, p_user_id text, p_except_id uuid)
RETURNS bigint LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(p_namespace, hashtext(p_user_id));
    RETURN (SELECT count(*) FROM messages AS m
            WHERE m.user_id = p_user_id AND m.status = 'streaming' AND m.role = 'assistant'
              AND m.id <> p_except_id)
         + (SELECT count(*) FROM open_calls AS c
            WHERE c.user_id = p_user_id AND c.id <> p_except_id);
END
$$
"""
COUNT_MESSAGES_ONLY = """
CREATE OR REPLACE FUNCTION chatgate_lock_user_streams(
    p_namespace integer, p_user_id text, p_except_id uuid)
RETURNS bigint LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(p_namespace, hashtext(p_user_id));
    RETURN (SELECT count(*) FROM messages AS m
            WHERE m.user_id = p_user_id AND m.status = 'streaming' AND m.role = 'assistant'
              AND m.id <> p_except_id);
END
$$
"""


def _is_postgresql() -> bool:
    return op.get_context().dialect.name == "postgresql"


def upgrade() -> None:
    op.create_table(
        "open_calls",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("user_id", sa.String(255), nullable=False),
        sa.Column("process_id", sa.String(64), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("calls", sa.JSON().with_variant(postgresql.JSONB(), "postgresql"),
                  nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_open_calls")),
    )
    op.create_index("ix_open_calls_user", "open_calls", ["user_id"])
    if _is_postgresql():
        op.execute(COUNT_WITH_OPEN_CALLS)


def downgrade() -> None:
    if _is_postgresql():
        op.execute(COUNT_MESSAGES_ONLY)
    op.drop_index("ix_open_calls_user", table_name="open_calls")
    op.drop_table("open_calls")
