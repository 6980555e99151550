"""threads.origin: where a thread came from, `chat` (POST /api/threads: the page, the native
API, /v1 chat completions with a thread) or `responses` (a stored Responses API call), so
that the page lists the user's chats and not every SDK call. Existing threads are `chat`:
which of them a Responses call made is not known any more.

Revision ID: 0015_thread_origin
Revises: 0013
Create Date: 2026-11-28 12:10:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015_thread_origin"
down_revision: str | Sequence[str] | None = "0014_fencing"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("threads") as batch:
        batch.add_column(sa.Column("origin", sa.String(16), nullable=False,
                                   server_default="chat"))
        batch.create_check_constraint(op.f("ck_threads_origin"),
                                      "origin IN ('chat', 'responses')")


def downgrade() -> None:
    with op.batch_alter_table("threads") as batch:
        batch.drop_constraint(op.f("ck_threads_origin"), type_="check")
        batch.drop_column("origin")
