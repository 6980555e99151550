"""Refused turn requests per UTC day and reason (`refusal_counts`), for the admin usage
dashboard: the Prometheus counter is per process and starts again at zero on restart.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-28 03:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | Sequence[str] | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "refusal_counts",
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("reason", sa.String(64), nullable=False),
        sa.Column("refusal_count", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("day", "reason", name=op.f("pk_refusal_counts")),
    )


def downgrade() -> None:
    op.drop_table("refusal_counts")
