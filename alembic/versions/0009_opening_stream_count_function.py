"""chatgate_lock_user_streams(namespace, user_id, except_id): revision 0007's lock and count,
leaving out one message, for a turn's opening to call from its own statement.

PostgreSQL only. Revision 0007's function is a statement of its own, the last of the
opening's transaction: a round trip, on the path to the first delta. The opening's one
statement (app.turn.rows.messages) can take the lock and count instead, but it also inserts the
turn's streaming assistant row, and whether the count's fresh snapshot sees that row depends
on the order in which the statement's parts run. So this count leaves the new row out by its
id: it counts the user's OTHER streaming answers, whatever the order. Lock, VOLATILE and
snapshot as in 0007. Frozen like every migration.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-26 16:30:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0009"
down_revision: str | Sequence[str] | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

CREATE_FUNCTION = """
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
DROP_FUNCTION = "DROP FUNCTION IF EXISTS chatgate_lock_user_streams(integer, text, uuid)"


def _is_postgresql() -> bool:
    return op.get_context().dialect.name == "postgresql"


def upgrade() -> None:
    if _is_postgresql():
        op.execute(CREATE_FUNCTION)


def downgrade() -> None:
    if _is_postgresql():
        op.execute(DROP_FUNCTION)
