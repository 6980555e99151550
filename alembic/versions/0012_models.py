"""Several models: a thread's last model choice (threads.model), the models a key may use
(api_keys.allowed_models, JSON list; NULL: all) and the model server of each call
(llm_calls.server). All nullable: existing rows mean what they meant.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-28 03:40:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0012"
down_revision: str | Sequence[str] | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _json() -> sa.types.TypeEngine[object]:
    return sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("threads") as batch:
        batch.add_column(sa.Column("model", sa.String(255), nullable=True))
    with op.batch_alter_table("api_keys") as batch:
        batch.add_column(sa.Column("allowed_models", _json(), nullable=True))
    with op.batch_alter_table("llm_calls") as batch:
        batch.add_column(sa.Column("server", sa.String(255), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("llm_calls") as batch:
        batch.drop_column("server")
    with op.batch_alter_table("api_keys") as batch:
        batch.drop_column("allowed_models")
    with op.batch_alter_table("threads") as batch:
        batch.drop_column("model")
