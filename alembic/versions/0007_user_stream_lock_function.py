"""chatgate_lock_user_streams(namespace, user_id): the turn limits' per-user lock and the
count of the user's streaming answers, in one statement.

PostgreSQL only (SQLite's BEGIN IMMEDIATE serialises openings already). The lock is an
advisory transaction lock, held to the commit; a turn opening takes it as its last statement,
so one user's openings wait for each other only over this call and the commit. The function
is VOLATILE so that, under READ COMMITTED, its count takes a snapshot after the lock is
granted and sees the rows the previous holder committed (a single SELECT of the lock and the
count would count with a snapshot taken before the wait). The body is frozen here, like every
migration: later changes get a new revision.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-25 09:00:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

CREATE_FUNCTION = """
CREATE OR REPLACE FUNCTION chatgate_lock_user_streams(p_namespace integer, p_user_id text)
RETURNS bigint LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(p_namespace, hashtext(p_user_id));
    RETURN (SELECT count(*) FROM messages AS m
            WHERE m.user_id = p_user_id AND m.status = 'streaming' AND m.role = 'assistant');
END
$$
"""
DROP_FUNCTION = "DROP FUNCTION IF EXISTS chatgate_lock_user_streams(integer, text)"


def _is_postgresql() -> bool:
    return op.get_context().dialect.name == "postgresql"


def upgrade() -> None:
    if _is_postgresql():
        op.execute(CREATE_FUNCTION)


def downgrade() -> None:
    if _is_postgresql():
        op.execute(DROP_FUNCTION)
