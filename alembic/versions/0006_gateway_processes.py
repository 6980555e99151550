"""Gateway processes with heartbeats, and the process streaming each `streaming` row: a
SIGKILLed process's rows are swept within seconds instead of after the stale-streaming age.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-24 05:50:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

TIMESTAMP = sa.DateTime(timezone=True)

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "gateway_processes",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("hostname", sa.String(255), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("started_at", TIMESTAMP, nullable=False),
        sa.Column("heartbeat_at", TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_gateway_processes")),
    )
    # A plain ADD COLUMN (nullable, no default) on both backends: no table rewrite.
    op.add_column("messages", sa.Column("stream_process", sa.String(64), nullable=True))
    op.create_index(
        "ix_messages_streaming_process", "messages", ["stream_process"], unique=False,
        postgresql_where=sa.text("status = 'streaming'"),
        sqlite_where=sa.text("status = 'streaming'"),
    )


def downgrade() -> None:
    op.drop_index("ix_messages_streaming_process", table_name="messages")
    # Plain DROP COLUMN (SQLite 3.35+): a batch copy of `messages` would fail on its
    # generated `tokens` column.
    op.drop_column("messages", "stream_process")
    op.drop_table("gateway_processes")
