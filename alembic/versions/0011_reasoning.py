"""Reasoning: each answer's visible reasoning and its thinking time (messages.reasoning,
messages.reasoning_ms), each call's reasoning tokens (llm_calls.reasoning_tokens) and the
daily rollup's sum of them (user_token_usage.reasoning_tokens).

The reasoning is a column of its own, not a key of the message's metadata: metadata is the
model's METADATA object, the page and the messages API read reasoning apart from it, and
the history the model is shown selects the content column only, so reasoning can never be
sent back to the model. NULL: no reasoning (every answer before this revision, and most
models'). The rollup's figure is 0 for older rows: their calls reported none. Frozen like
every migration.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-28 03:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | Sequence[str] | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Plain ALTER TABLE on both databases (no batch copy: SQLite cannot copy the generated
    # `messages.tokens` column into a new table, and adding or dropping a column needs none).
    op.add_column("messages", sa.Column("reasoning", sa.Text(), nullable=True))
    op.add_column("messages", sa.Column("reasoning_ms", sa.Integer(), nullable=True))
    op.add_column("llm_calls", sa.Column("reasoning_tokens", sa.Integer(), nullable=True))
    op.add_column("user_token_usage", sa.Column(
        "reasoning_tokens", sa.BigInteger(), nullable=False, server_default=sa.text("0")))


def downgrade() -> None:
    op.drop_column("user_token_usage", "reasoning_tokens")
    op.drop_column("llm_calls", "reasoning_tokens")
    op.drop_column("messages", "reasoning_ms")
    op.drop_column("messages", "reasoning")
