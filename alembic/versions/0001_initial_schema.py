"""Initial schema: threads, messages, llm_calls, user_token_usage, api_keys, followups,
message_repairs, stream_traces.

Backend-specific parts: messages.tokens is a generated column with a per-backend expression
(copied here, frozen, from app.store.models), and the GIN index on messages.metadata exists on
PostgreSQL only. Timestamps are timestamptz on PostgreSQL and naive-UTC DATETIME on SQLite.

Revision ID: 0001
Revises:
Create Date: 2026-11-22 03:18:58.330366
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TIMESTAMP = sa.DateTime(timezone=True)
JSON_DOCUMENT = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")
TOKENS_SQL = {
    "postgresql": (
        "CASE WHEN jsonb_typeof(metadata -> 'tokens') = 'number' "
        "AND (metadata ->> 'tokens') ~ '^[0-9]{1,9}$' "
        "THEN (metadata ->> 'tokens')::integer END"
    ),
    "sqlite": (
        "CASE WHEN json_type(metadata, '$.tokens') = 'integer' "
        "AND json_extract(metadata, '$.tokens') BETWEEN 0 AND 999999999 "
        "THEN json_extract(metadata, '$.tokens') END"
    ),
}


def _is_postgresql() -> bool:
    return op.get_context().dialect.name == "postgresql"


def _tokens_computed() -> sa.Computed:
    return sa.Computed(sa.text(TOKENS_SQL[op.get_context().dialect.name]), persisted=True)


def upgrade() -> None:
    op.create_table(
        "api_keys",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("user_id", sa.String(length=255), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("key_hash", sa.String(length=64), nullable=False),
        sa.Column("key_prefix", sa.String(length=16), nullable=False),
        sa.Column("is_admin", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("last_used_at", TIMESTAMP, nullable=True),
        sa.Column("revoked_at", TIMESTAMP, nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_keys")),
        sa.UniqueConstraint("key_hash", name=op.f("uq_api_keys_key_hash")),
    )
    op.create_index("ix_api_keys_user", "api_keys", ["user_id"], unique=False)
    op.create_table(
        "threads",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("user_id", sa.String(length=255), nullable=False),
        sa.Column("title", sa.Text(), nullable=True),
        sa.Column("summary", sa.Text(), nullable=True),
        sa.Column("autonomy", JSON_DOCUMENT, nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("updated_at", TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_threads")),
    )
    op.create_index("ix_threads_user_updated", "threads", ["user_id", "updated_at"], unique=False)
    op.create_table(
        "user_token_usage",
        sa.Column("user_id", sa.String(length=255), nullable=False),
        sa.Column("period_type", sa.String(length=8), nullable=False),
        sa.Column("period_start", sa.Date(), nullable=False),
        sa.Column("model", sa.String(length=255), nullable=False),
        sa.Column("total_tokens", sa.BigInteger(), nullable=False),
        sa.Column("prompt_tokens", sa.BigInteger(), nullable=False),
        sa.Column("completion_tokens", sa.BigInteger(), nullable=False),
        sa.Column("message_count", sa.Integer(), nullable=False),
        sa.Column("llm_call_count", sa.Integer(), nullable=False),
        sa.Column("cost_usd", sa.Numeric(precision=18, scale=9, asdecimal=False), nullable=True),
        sa.Column("unpriced_call_count", sa.Integer(), nullable=False),
        sa.Column("updated_at", TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint(
            "user_id", "period_type", "period_start", "model", name=op.f("pk_user_token_usage")
        ),
    )
    op.create_table(
        "followups",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("thread_id", sa.Uuid(), nullable=False),
        sa.Column("user_id", sa.String(length=255), nullable=False),
        sa.Column("trigger_type", sa.String(length=64), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("due_at", TIMESTAMP, nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("claimed_by", sa.String(length=255), nullable=True),
        sa.Column("claimed_at", TIMESTAMP, nullable=True),
        sa.Column("lease_expires_at", TIMESTAMP, nullable=True),
        sa.Column("finished_at", TIMESTAMP, nullable=True),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.CheckConstraint(
            "status IN ('pending', 'claimed', 'done', 'cancelled', 'failed')",
            name=op.f("ck_followups_status"),
        ),
        sa.ForeignKeyConstraint(
            ["thread_id"],
            ["threads.id"],
            name=op.f("fk_followups_thread_id_threads"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_followups")),
    )
    op.create_index("ix_followups_status_due", "followups", ["status", "due_at"], unique=False)
    op.create_index(
        "ix_followups_thread_status", "followups", ["thread_id", "status"], unique=False
    )
    op.create_table(
        "messages",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("thread_id", sa.Uuid(), nullable=False),
        sa.Column("user_id", sa.String(length=255), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("metadata", JSON_DOCUMENT, nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("synthetic", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("trigger_type", sa.String(length=64), nullable=True),
        sa.Column("tokens", sa.Integer(), _tokens_computed(), nullable=True),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("updated_at", TIMESTAMP, nullable=False),
        sa.Column("completed_at", TIMESTAMP, nullable=True),
        sa.CheckConstraint(
            "role IN ('user', 'assistant', 'system')", name=op.f("ck_messages_role")
        ),
        sa.CheckConstraint(
            "status IN ('complete', 'streaming', 'interrupted', 'failed')",
            name=op.f("ck_messages_status"),
        ),
        sa.ForeignKeyConstraint(
            ["thread_id"],
            ["threads.id"],
            name=op.f("fk_messages_thread_id_threads"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_messages")),
    )
    if _is_postgresql():
        op.create_index(
            "ix_messages_metadata_gin",
            "messages",
            ["metadata"],
            unique=False,
            postgresql_using="gin",
        )
    op.create_index(
        "ix_messages_thread_created", "messages", ["thread_id", "created_at", "id"], unique=False
    )
    op.create_index("ix_messages_user_created", "messages", ["user_id", "created_at"], unique=False)
    op.create_index(
        "uq_messages_one_streaming_per_thread",
        "messages",
        ["thread_id"],
        unique=True,
        postgresql_where=sa.text("status = 'streaming'"),
        sqlite_where=sa.text("status = 'streaming'"),
    )
    op.create_table(
        "llm_calls",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("message_id", sa.Uuid(), nullable=True),
        sa.Column("thread_id", sa.Uuid(), nullable=True),
        sa.Column("user_id", sa.String(length=255), nullable=False),
        sa.Column("stage", sa.String(length=32), nullable=False),
        sa.Column("model", sa.String(length=255), nullable=False),
        sa.Column("prompt_tokens", sa.Integer(), nullable=False),
        sa.Column("completion_tokens", sa.Integer(), nullable=False),
        sa.Column("total_tokens", sa.Integer(), nullable=False),
        sa.Column("cost_usd", sa.Numeric(precision=18, scale=9, asdecimal=False), nullable=True),
        sa.Column("usage_source", sa.String(length=16), nullable=False),
        sa.Column("started_at", TIMESTAMP, nullable=False),
        sa.Column("first_token_at", TIMESTAMP, nullable=True),
        sa.Column("finished_at", TIMESTAMP, nullable=True),
        sa.Column("duration_ms", sa.Integer(), nullable=True),
        sa.Column("status", sa.String(length=32), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.CheckConstraint(
            "usage_source IN ('provider', 'estimated', 'partial')",
            name=op.f("ck_llm_calls_usage_source"),
        ),
        sa.ForeignKeyConstraint(
            ["message_id"],
            ["messages.id"],
            name=op.f("fk_llm_calls_message_id_messages"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["thread_id"],
            ["threads.id"],
            name=op.f("fk_llm_calls_thread_id_threads"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_llm_calls")),
    )
    op.create_index("ix_llm_calls_message", "llm_calls", ["message_id"], unique=False)
    op.create_index(
        "ix_llm_calls_user_created", "llm_calls", ["user_id", "created_at"], unique=False
    )
    op.create_table(
        "message_repairs",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("run_id", sa.String(length=64), nullable=False),
        sa.Column("message_id", sa.Uuid(), nullable=False),
        sa.Column("rule", sa.String(length=64), nullable=False),
        sa.Column("old_content", sa.Text(), nullable=False),
        sa.Column("new_content", sa.Text(), nullable=False),
        sa.Column("old_metadata", JSON_DOCUMENT, nullable=False),
        sa.Column("new_metadata", JSON_DOCUMENT, nullable=False),
        sa.Column("repaired_at", TIMESTAMP, nullable=False),
        sa.Column("rolled_back_at", TIMESTAMP, nullable=True),
        sa.ForeignKeyConstraint(
            ["message_id"],
            ["messages.id"],
            name=op.f("fk_message_repairs_message_id_messages"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_message_repairs")),
    )
    op.create_index("ix_message_repairs_message", "message_repairs", ["message_id"], unique=False)
    op.create_index("ix_message_repairs_run", "message_repairs", ["run_id"], unique=False)
    op.create_table(
        "stream_traces",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("message_id", sa.Uuid(), nullable=False),
        sa.Column("thread_id", sa.Uuid(), nullable=False),
        sa.Column("user_id", sa.String(length=255), nullable=False),
        sa.Column("model", sa.String(length=255), nullable=True),
        sa.Column("chunks", JSON_DOCUMENT, nullable=False),
        sa.Column("events", JSON_DOCUMENT, nullable=False),
        sa.Column("status", sa.String(length=16), nullable=True),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.ForeignKeyConstraint(
            ["message_id"],
            ["messages.id"],
            name=op.f("fk_stream_traces_message_id_messages"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["thread_id"],
            ["threads.id"],
            name=op.f("fk_stream_traces_thread_id_threads"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_stream_traces")),
    )
    op.create_index("ix_stream_traces_message", "stream_traces", ["message_id"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_stream_traces_message", table_name="stream_traces")
    op.drop_table("stream_traces")
    op.drop_index("ix_message_repairs_run", table_name="message_repairs")
    op.drop_index("ix_message_repairs_message", table_name="message_repairs")
    op.drop_table("message_repairs")
    op.drop_index("ix_llm_calls_user_created", table_name="llm_calls")
    op.drop_index("ix_llm_calls_message", table_name="llm_calls")
    op.drop_table("llm_calls")
    op.drop_index(
        "uq_messages_one_streaming_per_thread",
        table_name="messages",
        postgresql_where=sa.text("status = 'streaming'"),
        sqlite_where=sa.text("status = 'streaming'"),
    )
    op.drop_index("ix_messages_user_created", table_name="messages")
    op.drop_index("ix_messages_thread_created", table_name="messages")
    if _is_postgresql():
        op.drop_index("ix_messages_metadata_gin", table_name="messages", postgresql_using="gin")
    op.drop_table("messages")
    op.drop_index("ix_followups_thread_status", table_name="followups")
    op.drop_index("ix_followups_status_due", table_name="followups")
    op.drop_table("followups")
    op.drop_table("user_token_usage")
    op.drop_index("ix_threads_user_updated", table_name="threads")
    op.drop_table("threads")
    op.drop_index("ix_api_keys_user", table_name="api_keys")
    op.drop_table("api_keys")
