"""Turn limits: a daily budget per API key, the rate limit's per-user minute windows, and a
partial index on the streaming rows of a user (the per-user stream cap counts them on every
turn request).

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-24 05:50:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TIMESTAMP = sa.DateTime(timezone=True)
STREAMING = sa.text("status = 'streaming'")


def upgrade() -> None:
    with op.batch_alter_table("api_keys") as batch:
        batch.add_column(sa.Column("daily_token_budget", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column(
            "daily_cost_budget_usd", sa.Numeric(precision=18, scale=9, asdecimal=False),
            nullable=True))
    op.create_table(
        "rate_limit_windows",
        sa.Column("user_id", sa.String(length=255), nullable=False),
        sa.Column("window_start", TIMESTAMP, nullable=False),
        sa.Column("request_count", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("user_id", "window_start", name=op.f("pk_rate_limit_windows")),
    )
    op.create_index("ix_messages_user_streaming", "messages", ["user_id"], unique=False,
                    postgresql_where=STREAMING, sqlite_where=STREAMING)


def downgrade() -> None:
    op.drop_index("ix_messages_user_streaming", table_name="messages")
    op.drop_table("rate_limit_windows")
    with op.batch_alter_table("api_keys") as batch:
        batch.drop_column("daily_cost_budget_usd")
        batch.drop_column("daily_token_budget")
