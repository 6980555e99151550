"""The schema: SQLAlchemy 2 declarative tables. Alembic migrations mirror this file.

No ORM relationships on purpose: loading is always explicit (an async session cannot lazy-load),
and deletes cascade in the database through the foreign keys.
"""

from __future__ import annotations

import datetime as dt
import functools
import uuid
from collections.abc import Mapping
from typing import Any, TypeVar, cast

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Computed,
    Date,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    Numeric,
    SmallInteger,
    String,
    Table,
    Text,
    Uuid,
    false,
    text,
    true,
)
from sqlalchemy import inspect as sa_inspect
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.orm import (
    DeclarativeBase,
    Mapped,
    configure_mappers,
    make_transient_to_detached,
    mapped_column,
)
from sqlalchemy.orm.instrumentation import ClassManager
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement

from app.core.clock import utcnow
from app.store.types import JsonDocument, UtcDateTime

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

MESSAGE_ROLES = ("user", "assistant", "system")
MESSAGE_STATUSES = ("complete", "streaming", "interrupted", "failed")
#: Where a thread came from: `chat`, made by POST /api/threads (the page, the native API, and
#: so /v1 chat completions with a thread); `responses`, made by a stored Responses API call.
THREAD_ORIGINS = ("chat", "responses")
FOLLOWUP_STATUSES = ("pending", "claimed", "done", "cancelled", "failed")
USAGE_SOURCES = ("provider", "estimated", "partial")

# The generated `messages.tokens` column: metadata.tokens when it is a JSON integer in
# [0, 999_999_999], else NULL. A float, a string or a huge number must not make the write fail
# (PostgreSQL would raise on a bad ::integer cast), so each backend checks before it converts.
TOKENS_SQL_POSTGRESQL = (
    "CASE WHEN jsonb_typeof(metadata -> 'tokens') = 'number' "
    "AND (metadata ->> 'tokens') ~ '^[0-9]{1,9}$' "
    "THEN (metadata ->> 'tokens')::integer END"
)
TOKENS_SQL_SQLITE = (
    "CASE WHEN json_type(metadata, '$.tokens') = 'integer' "
    "AND json_extract(metadata, '$.tokens') BETWEEN 0 AND 999999999 "
    "THEN json_extract(metadata, '$.tokens') END"
)


class metadata_tokens(FunctionElement[int]):
    """The dialect-specific expression behind the generated `tokens` column."""

    type = Integer()
    inherit_cache = True
    name = "metadata_tokens"


@compiles(metadata_tokens, "postgresql")
def _tokens_postgresql(element: metadata_tokens, compiler: SQLCompiler, **kw: Any) -> str:
    return TOKENS_SQL_POSTGRESQL


@compiles(metadata_tokens, "sqlite")
def _tokens_sqlite(element: metadata_tokens, compiler: SQLCompiler, **kw: Any) -> str:
    return TOKENS_SQL_SQLITE


def _in(values: tuple[str, ...]) -> str:
    return ", ".join(f"'{v}'" for v in values)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


ModelT = TypeVar("ModelT", bound=Base)


def table_of(model: type[Base]) -> Table:
    """A model's table, for the Core statements of the hot path: no ORM work per row, no
    search of the session's objects."""
    return cast(Table, model.__table__)


def unattached(model: type[ModelT], row: Mapping[Any, Any], prefix: str = "") -> ModelT:
    """A row a Core statement returned, each of the table's columns under its name after
    `prefix` (other labels are ignored), as a `model` object no session tracks (detached)."""
    return detached(model, {key: row[prefix + name] for key, name in _attribute_names(model)})


def detached(model: type[ModelT], values: Mapping[str, Any]) -> ModelT:
    """A stored row, given as its attributes' values, as a `model` object no session tracks,
    as a session leaves a row it loaded (detached): its values are the stored row's, so a
    session it is later added to would update that row, never insert it again. Built as
    SQLAlchemy's loading builds an object, its values put in the instance's dict: the
    constructor records each value as a change, 20 us an object against 7."""
    instance = cast(ModelT, _class_manager(model).new_instance())
    instance.__dict__.update(values)
    make_transient_to_detached(instance)
    return instance


@functools.cache
def _class_manager(model: type[Base]) -> ClassManager[Any]:
    """The model's class manager, the mappers configured first: a detached object needs its
    attributes' implementations, which a process whose first statement is a Core one has not
    set up yet."""
    configure_mappers()
    return sa_inspect(model).class_manager


@functools.cache
def _attribute_names(model: type[Base]) -> tuple[tuple[str, str], ...]:
    """Each column of the model's table: its attribute's name and its own."""
    mapper = sa_inspect(model)
    return tuple((mapper.get_property_by_column(column).key, column.name)
                 for column in table_of(model).c)


class Thread(Base):
    __tablename__ = "threads"
    __table_args__ = (Index("ix_threads_user_updated", "user_id", "updated_at"),
                      CheckConstraint(f"origin IN ({_in(THREAD_ORIGINS)})", name="origin"))

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    user_id: Mapped[str] = mapped_column(String(255))
    title: Mapped[str | None] = mapped_column(Text)
    summary: Mapped[str | None] = mapped_column(Text)
    autonomy: Mapped[dict[str, Any]] = mapped_column(JsonDocument, default=dict)
    created_at: Mapped[dt.datetime] = mapped_column(UtcDateTime, default=utcnow)
    updated_at: Mapped[dt.datetime] = mapped_column(UtcDateTime, default=utcnow)
    # The model the thread's last turn chose (a name of the gateway's catalog); NULL: the
    # catalog's default.
    model: Mapped[str | None] = mapped_column(String(255))
    # Where the thread came from (THREAD_ORIGINS): the page lists `chat` threads.
    origin: Mapped[str] = mapped_column(String(16), default="chat", server_default="chat")


class Message(Base):
    __tablename__ = "messages"
    __table_args__ = (
        CheckConstraint(f"role IN ({_in(MESSAGE_ROLES)})", name="role"),
        CheckConstraint(f"status IN ({_in(MESSAGE_STATUSES)})", name="status"),
        Index("ix_messages_thread_created", "thread_id", "created_at", "id"),
        Index("ix_messages_user_created", "user_id", "created_at"),
        Index("ix_messages_metadata_gin", "metadata", postgresql_using="gin").ddl_if(
            dialect="postgresql"
        ),
        # At most one assistant message per thread is streaming: a second turn gets ThreadBusy.
        Index(
            "uq_messages_one_streaming_per_thread",
            "thread_id",
            unique=True,
            postgresql_where=text("status = 'streaming'"),
            sqlite_where=text("status = 'streaming'"),
        ),
        # The per-user stream cap counts a user's streaming rows on every turn request.
        Index(
            "ix_messages_user_streaming",
            "user_id",
            postgresql_where=text("status = 'streaming'"),
            sqlite_where=text("status = 'streaming'"),
        ),
        # The dead-process sweep runs every heartbeat on every process: it must read the
        # few streaming rows, never scan the table.
        Index(
            "ix_messages_streaming_process",
            "stream_process",
            postgresql_where=text("status = 'streaming'"),
            sqlite_where=text("status = 'streaming'"),
        ),
    )
    # fetch `tokens` on every write: an expired attribute would need a lazy load later
    __mapper_args__ = {"eager_defaults": True}  # noqa: RUF012

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    thread_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("threads.id", ondelete="CASCADE")
    )
    user_id: Mapped[str] = mapped_column(String(255))
    role: Mapped[str] = mapped_column(String(16))
    content: Mapped[str] = mapped_column(Text, default="")
    meta: Mapped[dict[str, Any]] = mapped_column("metadata", JsonDocument, default=dict)
    status: Mapped[str] = mapped_column(String(16), default="complete")
    synthetic: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    trigger_type: Mapped[str | None] = mapped_column(String(64))
    tokens: Mapped[int | None] = mapped_column(Integer, Computed(metadata_tokens(), persisted=True))
    created_at: Mapped[dt.datetime] = mapped_column(UtcDateTime, default=utcnow)
    updated_at: Mapped[dt.datetime] = mapped_column(UtcDateTime, default=utcnow)
    completed_at: Mapped[dt.datetime | None] = mapped_column(UtcDateTime)
    #: The gateway process streaming this row (`gateway_processes.id`) while it is
    #: `streaming`: when that process's heartbeat stops, any live process sweeps the row.
    stream_process: Mapped[str | None] = mapped_column(String(64))
    #: The answer's visible reasoning (the model's thinking, shown apart from the answer),
    #: NULL when it had none. A column, not a metadata key: metadata is the model's METADATA
    #: object, and the history the model is shown reads `content` only, so reasoning is never
    #: sent back to the model.
    reasoning: Mapped[str | None] = mapped_column(Text)
    #: How long the model thought before its answer began (ms), NULL without reasoning.
    reasoning_ms: Mapped[int | None] = mapped_column(Integer)
    #: The message this one follows in the conversation (NULL: a first message). A thread
    #: is a tree: a regenerated answer is a child of the same question as the answer it
    #: replaces, an edited question a child of the same message as the question it
    #: replaces; nothing is deleted, so every version stays.
    parent_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    #: On the thread's current branch: the path from its first message that the page shows
    #: and the model is shown. Kept on the row (not derived from parent_id) so that every
    #: read of a thread's history stays one indexed scan in time order: a branch is ordered
    #: by created_at, since a message is always created after its parent.
    on_branch: Mapped[bool] = mapped_column(Boolean, default=True, server_default=true())


class GatewayProcess(Base):
    """A running gateway process and its last heartbeat; a row whose heartbeat is older than
    the dead-after setting belongs to a process that died (SIGKILL, lost host)."""

    __tablename__ = "gateway_processes"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    hostname: Mapped[str] = mapped_column(String(255))
    pid: Mapped[int] = mapped_column(Integer)
    started_at: Mapped[dt.datetime] = mapped_column(UtcDateTime, default=utcnow)
    heartbeat_at: Mapped[dt.datetime] = mapped_column(UtcDateTime, default=utcnow)
    #: By when the process has ended its own answers if it cannot renew its heartbeat
    #: (app.config.fencing): nobody sweeps them before. NULL: the heartbeat's age alone decides.
    lease_until: Mapped[dt.datetime | None] = mapped_column(UtcDateTime, nullable=True)


class OpenCall(Base):
    """A call without a message while it runs (an OpenAI-style call without a thread): the
    user's stream cap counts it, in every process, as it counts a `streaming` answer; its
    `calls` are the calls so far as the last checkpoint wrote them (checkpoint entries,
    app.answer.records), which the dead-process sweep bills should its process die. Deleted when
    the call is billed."""

    __tablename__ = "open_calls"
    __table_args__ = (Index("ix_open_calls_user", "user_id"),)

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    user_id: Mapped[str] = mapped_column(String(255))
    process_id: Mapped[str | None] = mapped_column(String(64))
    started_at: Mapped[dt.datetime] = mapped_column(UtcDateTime, default=utcnow)
    calls: Mapped[list[dict[str, Any]] | None] = mapped_column(JsonDocument)


class LlmCall(Base):
    """One upstream call. Billing data: it outlives a deleted thread (FKs set to NULL)."""

    __tablename__ = "llm_calls"
    __table_args__ = (
        CheckConstraint(f"usage_source IN ({_in(USAGE_SOURCES)})", name="usage_source"),
        Index("ix_llm_calls_message", "message_id"),
        Index("ix_llm_calls_user_created", "user_id", "created_at"),
        # backfill and verify scan one UTC day of calls across all users
        Index("ix_llm_calls_created", "created_at"),
    )

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    message_id: Mapped[uuid.UUID | None] = mapped_column(
        Uuid, ForeignKey("messages.id", ondelete="SET NULL")
    )
    thread_id: Mapped[uuid.UUID | None] = mapped_column(
        Uuid, ForeignKey("threads.id", ondelete="SET NULL")
    )
    user_id: Mapped[str] = mapped_column(String(255))
    stage: Mapped[str] = mapped_column(String(32))
    model: Mapped[str] = mapped_column(String(255))
    prompt_tokens: Mapped[int] = mapped_column(Integer)
    completion_tokens: Mapped[int] = mapped_column(Integer)
    total_tokens: Mapped[int] = mapped_column(Integer)
    cost_usd: Mapped[float | None] = mapped_column(Numeric(18, 9, asdecimal=False))
    usage_source: Mapped[str] = mapped_column(String(16))
    started_at: Mapped[dt.datetime] = mapped_column(UtcDateTime)
    first_token_at: Mapped[dt.datetime | None] = mapped_column(UtcDateTime)
    finished_at: Mapped[dt.datetime | None] = mapped_column(UtcDateTime)
    duration_ms: Mapped[int | None] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(32))
    error: Mapped[str | None] = mapped_column(Text)
    # The model server the call went to (the models file's name); NULL before there were several.
    server: Mapped[str | None] = mapped_column(String(255))
    #: The provider's `completion_tokens_details.reasoning_tokens` (part of completion_tokens),
    #: NULL when it reported none.
    reasoning_tokens: Mapped[int | None] = mapped_column(Integer)
    # The moment the turn was finished; the rollup's UTC day is taken from it.
    created_at: Mapped[dt.datetime] = mapped_column(UtcDateTime, default=utcnow)


class UserTokenUsage(Base):
    """Rollup per (user, period, model), updated atomically with each finished message, in
    up to 16 rows (`shard`) that readers sum: a process's finishes take the shards in turn
    (app.usage.shards), so one busy user's finishes running at once do not
    wait on each other's row lock."""

    __tablename__ = "user_token_usage"

    user_id: Mapped[str] = mapped_column(String(255), primary_key=True)
    period_type: Mapped[str] = mapped_column(String(8), primary_key=True)
    period_start: Mapped[dt.date] = mapped_column(Date, primary_key=True)
    model: Mapped[str] = mapped_column(String(255), primary_key=True)
    shard: Mapped[int] = mapped_column(SmallInteger, primary_key=True, default=0,
                                       server_default=text("0"))
    total_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    prompt_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    completion_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    message_count: Mapped[int] = mapped_column(Integer, default=0)
    llm_call_count: Mapped[int] = mapped_column(Integer, default=0)
    # Sum of the known costs; NULL only while every call was unpriced. unpriced_call_count
    # says how many calls the sum is missing, so a partial cost never passes for a full one.
    cost_usd: Mapped[float | None] = mapped_column(Numeric(18, 9, asdecimal=False))
    unpriced_call_count: Mapped[int] = mapped_column(Integer, default=0)
    #: The reasoning tokens the providers reported (counted in completion_tokens already).
    reasoning_tokens: Mapped[int] = mapped_column(BigInteger, default=0,
                                                  server_default=text("0"))
    updated_at: Mapped[dt.datetime] = mapped_column(UtcDateTime, default=utcnow)


class ApiKey(Base):
    __tablename__ = "api_keys"
    __table_args__ = (Index("ix_api_keys_user", "user_id"),)

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    user_id: Mapped[str] = mapped_column(String(255))
    name: Mapped[str] = mapped_column(String(255))
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)  # sha256 hex, never the key
    key_prefix: Mapped[str] = mapped_column(String(16))  # first characters, to recognise a key
    is_admin: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    created_at: Mapped[dt.datetime] = mapped_column(UtcDateTime, default=utcnow)
    last_used_at: Mapped[dt.datetime | None] = mapped_column(UtcDateTime)
    revoked_at: Mapped[dt.datetime | None] = mapped_column(UtcDateTime)
    # Optional daily budget (UTC day), checked against the user's rollup; NULL: no budget.
    daily_token_budget: Mapped[int | None] = mapped_column(BigInteger)
    daily_cost_budget_usd: Mapped[float | None] = mapped_column(Numeric(18, 9, asdecimal=False))
    # The models (catalog names) the key may use; NULL: every model.
    allowed_models: Mapped[list[str] | None] = mapped_column(JsonDocument)


class RateLimitWindow(Base):
    """Turn requests of one user in one fixed window (a minute): the rate limit's counter,
    shared by every gateway process on the database."""

    __tablename__ = "rate_limit_windows"

    user_id: Mapped[str] = mapped_column(String(255), primary_key=True)
    window_start: Mapped[dt.datetime] = mapped_column(UtcDateTime, primary_key=True)
    request_count: Mapped[int] = mapped_column(Integer, default=0)


class RefusalCount(Base):
    """Turn requests the limits refused, per UTC day and reason (too_many_streams,
    rate_limited, budget_exceeded, gateway_busy): the Prometheus counter is per process and
    forgets on restart, this rollup is what the admin dashboard shows across processes. Each
    process adds the refusals it counted since its last flush (app.usage.refusals)."""

    __tablename__ = "refusal_counts"

    day: Mapped[dt.date] = mapped_column(Date, primary_key=True)
    reason: Mapped[str] = mapped_column(String(64), primary_key=True)
    refusal_count: Mapped[int] = mapped_column(BigInteger, default=0)
    updated_at: Mapped[dt.datetime] = mapped_column(UtcDateTime, default=utcnow)


class Followup(Base):
    __tablename__ = "followups"
    __table_args__ = (
        CheckConstraint(f"status IN ({_in(FOLLOWUP_STATUSES)})", name="status"),
        Index("ix_followups_thread_status", "thread_id", "status"),
        Index("ix_followups_status_due", "status", "due_at"),
    )

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    thread_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("threads.id", ondelete="CASCADE")
    )
    user_id: Mapped[str] = mapped_column(String(255))
    trigger_type: Mapped[str] = mapped_column(String(64))
    reason: Mapped[str] = mapped_column(Text, default="")
    due_at: Mapped[dt.datetime] = mapped_column(UtcDateTime)
    status: Mapped[str] = mapped_column(String(16), default="pending")
    attempts: Mapped[int] = mapped_column(Integer, default=0, server_default=text("0"))
    claimed_by: Mapped[str | None] = mapped_column(String(255))
    claimed_at: Mapped[dt.datetime | None] = mapped_column(UtcDateTime)
    lease_expires_at: Mapped[dt.datetime | None] = mapped_column(UtcDateTime)
    finished_at: Mapped[dt.datetime | None] = mapped_column(UtcDateTime)
    created_at: Mapped[dt.datetime] = mapped_column(UtcDateTime, default=utcnow)


class MessageRepair(Base):
    """Backup of one repaired message, so every repair can be rolled back."""

    __tablename__ = "message_repairs"
    __table_args__ = (
        Index("ix_message_repairs_run", "run_id"),
        Index("ix_message_repairs_message", "message_id"),
    )

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    run_id: Mapped[str] = mapped_column(String(64))
    message_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("messages.id", ondelete="CASCADE")
    )
    rule: Mapped[str] = mapped_column(String(64))
    old_content: Mapped[str] = mapped_column(Text)
    new_content: Mapped[str] = mapped_column(Text)
    old_metadata: Mapped[dict[str, Any]] = mapped_column(JsonDocument)
    new_metadata: Mapped[dict[str, Any]] = mapped_column(JsonDocument)
    repaired_at: Mapped[dt.datetime] = mapped_column(UtcDateTime, default=utcnow)
    rolled_back_at: Mapped[dt.datetime | None] = mapped_column(UtcDateTime)


class StreamTrace(Base):
    """Raw upstream chunks of one stream and the filter's events, for replay."""

    __tablename__ = "stream_traces"
    __table_args__ = (Index("ix_stream_traces_message", "message_id"),)

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    message_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("messages.id", ondelete="CASCADE")
    )
    thread_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("threads.id", ondelete="CASCADE")
    )
    user_id: Mapped[str] = mapped_column(String(255))
    model: Mapped[str | None] = mapped_column(String(255))
    chunks: Mapped[list[Any]] = mapped_column(JsonDocument, default=list)
    events: Mapped[list[Any]] = mapped_column(JsonDocument, default=list)
    status: Mapped[str | None] = mapped_column(String(16))
    created_at: Mapped[dt.datetime] = mapped_column(UtcDateTime, default=utcnow)
