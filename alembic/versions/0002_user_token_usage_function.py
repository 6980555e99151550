"""get_user_token_usage(user_id, start, end): a user's usage over their assistant messages.

PostgreSQL only (SQLite has no stored functions; app.usage.reports_repository runs the same query
in SQLAlchemy there, and a test checks both agree). NULL start or end means unbounded; rows
still `streaming` are not finished messages and are left out. The body is frozen here, like
every migration: later changes get a new revision.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22 05:10:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

CREATE_FUNCTION = """
CREATE OR REPLACE FUNCTION get_user_token_usage(
    p_user_id text, p_start timestamptz, p_end timestamptz
) RETURNS TABLE (
    total_tokens bigint, message_count bigint, conversation_count bigint,
    first_message timestamptz, last_message timestamptz
) LANGUAGE sql STABLE AS $$
    SELECT COALESCE(SUM(m.tokens), 0)::bigint, COUNT(*)::bigint,
           COUNT(DISTINCT m.thread_id)::bigint, MIN(m.created_at), MAX(m.created_at)
    FROM messages AS m
    WHERE m.user_id = p_user_id
      AND m.role = 'assistant'
      AND m.status <> 'streaming'
      AND (p_start IS NULL OR m.created_at >= p_start)
      AND (p_end IS NULL OR m.created_at < p_end)
$$
"""
DROP_FUNCTION = "DROP FUNCTION IF EXISTS get_user_token_usage(text, timestamptz, timestamptz)"


def _is_postgresql() -> bool:
    return op.get_context().dialect.name == "postgresql"


def upgrade() -> None:
    if _is_postgresql():
        op.execute(CREATE_FUNCTION)


def downgrade() -> None:
    if _is_postgresql():
        op.execute(DROP_FUNCTION)
