"""Fencing: each gateway process's lease in its row. `lease_until` is the time by which the
process has ended its own answers should it fail to renew its heartbeat (its heartbeat's time
plus its fence bound plus the margin, app.config.fencing); no other process sweeps its answers
before then, whatever its own dead-after setting says. NULL (a process of an older gateway):
the heartbeat's age alone decides.

Revision ID: 0014_fencing
Revises: 0013
Create Date: 2026-11-28 12:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014_fencing"
down_revision: str | Sequence[str] | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # A plain ADD COLUMN (nullable, no default) on both backends: no table rewrite.
    op.add_column("gateway_processes",
                  sa.Column("lease_until", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("gateway_processes") as batch:
        batch.drop_column("lease_until")
