"""user_token_usage.shard: a (user, period, model) rollup is kept in up to 16 rows that
readers sum, each process adding to its own, so that one busy user's finishes on several
processes do not queue on one row's lock. Existing rows are shard 0.

Revision ID: 0017_rollup_shards
Revises: 0016_message_tree
Create Date: 2026-11-29 01:40:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017_rollup_shards"
down_revision: str | Sequence[str] | None = "0016_message_tree"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_KEY = ["user_id", "period_type", "period_start", "model"]
_SUMMED = ("total_tokens", "prompt_tokens", "completion_tokens", "message_count",
           "llm_call_count", "unpriced_call_count", "reasoning_tokens", "cost_usd")

#: The downgrade's merge: each rollup's sums as one row of shard -1 (SUM of cost_usd is NULL
#: only when every shard's is, as the upsert keeps it), then the shards' rows dropped.
_MERGED = f"""
INSERT INTO user_token_usage ({", ".join(_KEY)}, shard, {", ".join(_SUMMED)}, updated_at)
SELECT {", ".join(_KEY)}, -1, {", ".join(f"SUM({name})" for name in _SUMMED)}, MAX(updated_at)
FROM user_token_usage GROUP BY {", ".join(_KEY)}
"""


def upgrade() -> None:
    with op.batch_alter_table("user_token_usage") as batch:
        batch.add_column(sa.Column("shard", sa.SmallInteger(), nullable=False,
                                   server_default=sa.text("0")))
        batch.drop_constraint(op.f("pk_user_token_usage"), type_="primary")
        batch.create_primary_key(op.f("pk_user_token_usage"), [*_KEY, "shard"])


def downgrade() -> None:
    op.execute(_MERGED)
    op.execute("DELETE FROM user_token_usage WHERE shard <> -1")
    with op.batch_alter_table("user_token_usage") as batch:
        batch.drop_constraint(op.f("pk_user_token_usage"), type_="primary")
        batch.drop_column("shard")
        batch.create_primary_key(op.f("pk_user_token_usage"), _KEY)
