"""The SQL that reads usage back and rewrites the daily rollup: queries only.

Two views of usage exist:
- the rollup (`user_token_usage`, per user, UTC day and model, in shards that sum),
  incremented by app.usage.repository when a message is finished; `stored_rollups` reads
  it, `finished_calls` reads the raw `llm_calls` rows it should add up to, and
  `replace_rollup_day` rewrites one day. What a day should hold and whether it does is
  decided in app.usage.rollups (backfill and verify), and how a report sums the rows in
  app.usage.reports;
- the messages themselves (`messages.tokens`, the generated column from metadata.tokens);
  `get_user_token_usage` summarises them (a SQL function on PostgreSQL, the same query in
  SQLAlchemy on SQLite).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass

from sqlalchemy import BigInteger, bindparam, delete, distinct, func, select, text
from sqlalchemy.ext.asyncio import AsyncSession

from app.answer.records import CallRecord
from app.core.clock import utcnow
from app.store.models import LlmCall, Message, UserTokenUsage
from app.store.per_database import PerDatabase
from app.store.types import UtcDateTime
from app.usage.figures import RollupKey, UsageFigures, exact_cost
from app.usage.repository import PERIOD_DAY


def day_start(day: dt.date) -> dt.datetime:
    """Midnight UTC opening `day` (rollup days are UTC days)."""
    return dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC)


# -- get_user_token_usage: over assistant messages ----------------------------------------


@dataclass(frozen=True, slots=True)
class MessageUsage:
    """A user's assistant messages in [start, end): tokens from `messages.tokens` (messages
    without token data add nothing to total_tokens but are counted as messages)."""

    total_tokens: int
    message_count: int
    conversation_count: int
    first_message: dt.datetime | None
    last_message: dt.datetime | None


# The SQL function is created by alembic revision 0002 (alembic/versions/
# 0002_user_token_usage_function.py); get_user_token_usage_query is its SQLAlchemy twin.
_CALL_FUNCTION = text(
    "SELECT total_tokens, message_count, conversation_count, first_message, last_message "
    "FROM get_user_token_usage(:user_id, :start, :end)"
).bindparams(
    bindparam("start", type_=UtcDateTime), bindparam("end", type_=UtcDateTime)
).columns(
    total_tokens=BigInteger, message_count=BigInteger, conversation_count=BigInteger,
    first_message=UtcDateTime, last_message=UtcDateTime,
)


async def get_user_token_usage_sql_function(
    s: AsyncSession, user_id: str, start: dt.datetime | None, end: dt.datetime | None
) -> MessageUsage:
    """The PostgreSQL function's answer (PostgreSQL only)."""
    row = (await s.execute(_CALL_FUNCTION, {"user_id": user_id, "start": start, "end": end})).one()
    return MessageUsage(int(row[0]), int(row[1]), int(row[2]), row[3], row[4])


async def get_user_token_usage_query(
    s: AsyncSession, user_id: str, start: dt.datetime | None, end: dt.datetime | None
) -> MessageUsage:
    """The same query as the SQL function, in SQLAlchemy (any backend)."""
    query = select(
        func.coalesce(func.sum(Message.tokens), 0),
        func.count(),
        func.count(distinct(Message.thread_id)),
        func.min(Message.created_at),
        func.max(Message.created_at),
    ).where(Message.user_id == user_id, Message.role == "assistant",
            Message.status != "streaming")
    if start is not None:
        query = query.where(Message.created_at >= start)
    if end is not None:
        query = query.where(Message.created_at < end)
    row = (await s.execute(query)).one()
    return MessageUsage(int(row[0] or 0), int(row[1]), int(row[2]), row[3], row[4])


async def get_user_token_usage(
    s: AsyncSession, user_id: str, start: dt.datetime | None, end: dt.datetime | None
) -> MessageUsage:
    """Usage over the user's assistant messages created in [start, end) (None: unbounded):
    the SQL function on PostgreSQL, the SQLAlchemy query elsewhere."""
    return await _USER_USAGE.of(s)(s, user_id, start, end)


_USER_USAGE = PerDatabase(postgres=get_user_token_usage_sql_function,
                          sqlite=get_user_token_usage_query)


# -- the daily rollup ---------------------------------------------------------------------


def _figures_of(row: UserTokenUsage) -> UsageFigures:
    return UsageFigures(
        row.total_tokens, row.prompt_tokens, row.completion_tokens, row.message_count,
        row.llm_call_count, exact_cost(row.cost_usd), row.unpriced_call_count,
        row.reasoning_tokens,
    )


async def stored_rollups(
    s: AsyncSession, first_day: dt.date, last_day: dt.date, *, user_id: str | None = None,
) -> dict[RollupKey, UsageFigures]:
    """The daily rollups of [first_day, last_day] as they are (one user's when given), in
    (day, model, user) order: each the exact sum of its shards' rows."""
    query = select(UserTokenUsage).where(
        UserTokenUsage.period_type == PERIOD_DAY,
        UserTokenUsage.period_start >= first_day, UserTokenUsage.period_start <= last_day,
    )
    if user_id is not None:
        query = query.where(UserTokenUsage.user_id == user_id)
    result = await s.execute(query.order_by(
        UserTokenUsage.period_start, UserTokenUsage.model, UserTokenUsage.user_id))
    rollups: dict[RollupKey, UsageFigures] = {}
    for row in result.scalars():
        rollups.setdefault((row.user_id, row.period_start, row.model),
                           UsageFigures()).add(_figures_of(row))
    return rollups


async def lock_rollups(s: AsyncSession) -> None:
    """PostgreSQL: make finishes wait while rollups are rewritten (reads still run). A finish
    that already wrote holds a row lock, so this waits for it to commit first; a finish that
    comes later adds its delta on top of the rewritten row. SQLite: BEGIN IMMEDIATE already
    serialises every writer."""
    lock = _LOCK_ROLLUPS.of(s)
    if lock is not None:
        await s.execute(lock)


_LOCK_ROLLUPS = PerDatabase(postgres=text("LOCK TABLE user_token_usage IN EXCLUSIVE MODE"),
                            sqlite=None)


async def replace_rollup_day(
    s: AsyncSession, day: dt.date, figures: Mapping[RollupKey, UsageFigures]
) -> None:
    """Delete every daily rollup row of `day` (every shard) and insert `figures` (keys of
    that day) in their place, as shard 0. Call lock_rollups first in the same transaction."""
    await s.execute(
        delete(UserTokenUsage).where(UserTokenUsage.period_type == PERIOD_DAY,
                                     UserTokenUsage.period_start == day)
    )
    now = utcnow()
    s.add_all(
        UserTokenUsage(
            user_id=user_id, period_type=PERIOD_DAY, period_start=key_day, model=model,
            total_tokens=f.total_tokens, prompt_tokens=f.prompt_tokens,
            completion_tokens=f.completion_tokens, message_count=f.message_count,
            llm_call_count=f.llm_call_count,
            cost_usd=None if f.cost_usd is None else float(f.cost_usd),
            unpriced_call_count=f.unpriced_call_count,
            reasoning_tokens=f.reasoning_tokens, updated_at=now,
        )
        for (user_id, key_day, model), f in sorted(figures.items())
    )
    await s.flush()


# -- the raw llm_calls rows ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FinishedCall:
    """One llm_calls row: whose, when the finish that wrote it ran, and the call itself.
    Every row of one finish shares `written_at` (llm_calls.created_at), which is how the
    rows of one turn are found again even after its thread (and message_id) is gone."""

    user_id: str
    written_at: dt.datetime
    call: CallRecord


def _as_record(row: LlmCall) -> CallRecord:
    return CallRecord(
        stage=row.stage, model=row.model, prompt_tokens=row.prompt_tokens,
        completion_tokens=row.completion_tokens,
        cost_usd=row.cost_usd, usage_source=row.usage_source,  # type: ignore[arg-type]
        started_at=row.started_at, first_token_at=row.first_token_at,
        finished_at=row.finished_at, status=row.status,
        error=row.error, reasoning_tokens=row.reasoning_tokens,
    )


async def finished_calls(
    s: AsyncSession, first_day: dt.date, last_day: dt.date
) -> list[FinishedCall]:
    """The llm_calls rows written on the UTC days [first_day, last_day] (the day a message was
    finished), in finish order, then by user and pipeline order."""
    result = await s.execute(
        select(LlmCall)
        .where(LlmCall.created_at >= day_start(first_day),
               LlmCall.created_at < day_start(last_day + dt.timedelta(days=1)))
        .order_by(LlmCall.created_at, LlmCall.user_id, LlmCall.started_at, LlmCall.id)
    )
    return [FinishedCall(row.user_id, row.created_at, _as_record(row))
            for row in result.scalars()]


# -- which days, what is missing ----------------------------------------------------------


async def begin_snapshot(s: AsyncSession) -> None:
    """PostgreSQL: read the raw rows and the rollup from one snapshot (REPEATABLE READ), so a
    finish committing in between cannot show as a mismatch. Call first in the transaction.
    SQLite: a transaction reads from one snapshot already."""
    await s.connection(execution_options=_ONE_SNAPSHOT.of(s))


_ONE_SNAPSHOT = PerDatabase(postgres={"isolation_level": "REPEATABLE READ"}, sqlite={})


async def usage_days(s: AsyncSession) -> list[dt.date]:
    """Every UTC day that has llm_calls rows or daily rollup rows, oldest first."""
    days = {
        d for (d,) in await s.execute(
            select(UserTokenUsage.period_start)
            .where(UserTokenUsage.period_type == PERIOD_DAY).distinct()
        )
    }
    first, last = (await s.execute(select(func.min(LlmCall.created_at),
                                          func.max(LlmCall.created_at)))).one()
    if first is not None and last is not None:
        day, stop = first.astimezone(dt.UTC).date(), last.astimezone(dt.UTC).date()
        while day <= stop:
            days.add(day)
            day += dt.timedelta(days=1)
    return sorted(days)


async def messages_without_token_data(
    s: AsyncSession, first_day: dt.date | None = None, last_day: dt.date | None = None
) -> int:
    """Finished assistant messages whose metadata has no usable `tokens` (rows older than
    usage accounting): unknown, not zero. The days limit it to messages created then."""
    query = select(func.count()).select_from(Message).where(
        Message.role == "assistant", Message.status != "streaming", Message.tokens.is_(None)
    )
    if first_day is not None:
        query = query.where(Message.created_at >= day_start(first_day))
    if last_day is not None:
        query = query.where(Message.created_at < day_start(last_day + dt.timedelta(days=1)))
    return int(await s.scalar(query) or 0)
