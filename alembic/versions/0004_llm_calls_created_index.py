"""Index llm_calls by created_at: `scripts/usage.py backfill` and `verify` read one UTC day of
calls across all users, which the (user_id, created_at) index cannot serve.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-22 04:20:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_llm_calls_created", "llm_calls", ["created_at"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_llm_calls_created", table_name="llm_calls")
