"""Usage reports, backfill and verification: all the SQL that reads usage back.

Two views of usage exist and both are kept honest:
- the rollup (`user_token_usage`, per user, UTC day and model), written by
  app.store.usage when a message is finished; `usage_report` reads it, `backfill_rollups`
  recomputes it from the raw `llm_calls` rows and `verify_rollups` compares the two;
- the messages themselves (`messages.tokens`, the generated column from metadata.tokens);
  `get_user_token_usage` summarises them (a SQL function on PostgreSQL, the same query in
  SQLAlchemy on SQLite).

Recomputing groups the llm_calls rows by the finish that wrote them and applies
app.store.usage.deltas_by_model (and its message_carriers), the very rule the finish path
applies, so the backfill and the live rollup cannot disagree about how a turn is counted,
even after its thread (and so its message_id) is gone.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Literal

from sqlalchemy import BigInteger, bindparam, delete, distinct, func, select, text
from sqlalchemy.ext.asyncio import AsyncSession

from app.clock import utcnow
from app.store.models import LlmCall, Message, UserTokenUsage
from app.store.types import UtcDateTime
from app.store.usage import PERIOD_DAY, UsageDelta, deltas_by_model
from app.turns.records import CallRecord

GroupBy = Literal["day", "model"]
COST_QUANTUM = Decimal("0.000000001")  # the rollup column's scale: Numeric(18, 9)
USAGE_FIELDS = (
    "total_tokens", "prompt_tokens", "completion_tokens", "message_count", "llm_call_count",
    "cost_usd", "unpriced_call_count",
)


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
    if s.get_bind().dialect.name == "postgresql":
        return await get_user_token_usage_sql_function(s, user_id, start, end)
    return await get_user_token_usage_query(s, user_id, start, end)


# -- reports from the rollup --------------------------------------------------------------


@dataclass(slots=True)
class UsageFigures:
    """Sums of rollup rows. cost_usd is the sum of the known costs, None while no call was
    priced; unpriced_call_count says how many calls it is missing."""

    total_tokens: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    message_count: int = 0
    llm_call_count: int = 0
    cost_usd: Decimal | None = None
    unpriced_call_count: int = 0

    def add(self, other: UsageFigures) -> None:
        self.total_tokens += other.total_tokens
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        self.message_count += other.message_count
        self.llm_call_count += other.llm_call_count
        self.unpriced_call_count += other.unpriced_call_count
        if other.cost_usd is not None:
            self.cost_usd = (self.cost_usd or Decimal(0)) + other.cost_usd

    def as_dict(self) -> dict[str, int | float | None]:
        return {
            "total_tokens": self.total_tokens,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "message_count": self.message_count,
            "llm_call_count": self.llm_call_count,
            "cost_usd": None if self.cost_usd is None else float(self.cost_usd),
            "unpriced_call_count": self.unpriced_call_count,
        }


def _cost(value: float | Decimal | None) -> Decimal | None:
    """A cost as an exact decimal at the rollup's scale (floats go through their repr)."""
    if value is None:
        return None
    return Decimal(str(value)).quantize(COST_QUANTUM)


def _figures_of(row: UserTokenUsage) -> UsageFigures:
    return UsageFigures(
        row.total_tokens, row.prompt_tokens, row.completion_tokens, row.message_count,
        row.llm_call_count, _cost(row.cost_usd), row.unpriced_call_count,
    )


def _figures_of_delta(delta: UsageDelta, cost: Decimal | None) -> UsageFigures:
    return UsageFigures(
        delta.total_tokens, delta.prompt_tokens, delta.completion_tokens, delta.message_count,
        delta.llm_call_count, cost, delta.unpriced_call_count,
    )


@dataclass(slots=True)
class UsageReport:
    """A user's usage over whole UTC days [start, end]: totals and one row per day or model."""

    user_id: str
    start: dt.date
    end: dt.date
    group_by: GroupBy
    totals: UsageFigures = field(default_factory=UsageFigures)
    rows: dict[str, UsageFigures] = field(default_factory=dict)


async def usage_report(
    s: AsyncSession, user_id: str, start: dt.date, end: dt.date, group_by: GroupBy
) -> UsageReport:
    """The rollup summed per day (ISO date key) or per model, over [start, end] inclusive."""
    result = await s.execute(
        select(UserTokenUsage)
        .where(UserTokenUsage.user_id == user_id, UserTokenUsage.period_type == PERIOD_DAY,
               UserTokenUsage.period_start >= start, UserTokenUsage.period_start <= end)
        .order_by(UserTokenUsage.period_start, UserTokenUsage.model)
    )
    report = UsageReport(user_id, start, end, group_by)
    for row in result.scalars():
        key = row.period_start.isoformat() if group_by == "day" else row.model
        figures = _figures_of(row)
        report.rows.setdefault(key, UsageFigures()).add(figures)
        report.totals.add(figures)
    return report


# -- recomputing rollups from llm_calls ---------------------------------------------------

RollupKey = tuple[str, dt.date, str]  # (user_id, day, model)


def _as_record(row: LlmCall) -> CallRecord:
    return CallRecord(
        stage=row.stage, model=row.model, prompt_tokens=row.prompt_tokens,
        completion_tokens=row.completion_tokens,
        cost_usd=row.cost_usd, usage_source=row.usage_source,  # type: ignore[arg-type]
        started_at=row.started_at, first_token_at=row.first_token_at,
        finished_at=row.finished_at, status=row.status,
        error=row.error,
    )


def _turn_figures(calls: Sequence[LlmCall]) -> dict[str, UsageFigures]:
    """One finish's contribution per model, by the finish path's own rule; costs summed
    exactly (the rollup column adds decimals, not floats)."""
    deltas = deltas_by_model([_as_record(c) for c in calls])
    costs: dict[str, Decimal | None] = {}
    for call in calls:
        cost = _cost(call.cost_usd)
        if cost is not None:
            costs[call.model] = (costs.get(call.model) or Decimal(0)) + cost
    return {model: _figures_of_delta(d, costs.get(model)) for model, d in deltas.items()}


async def raw_usage(
    s: AsyncSession, first_day: dt.date, last_day: dt.date
) -> dict[RollupKey, UsageFigures]:
    """What the daily rollup should hold for [first_day, last_day], from the llm_calls rows.
    The day of a call is the UTC day its message was finished (llm_calls.created_at).

    A turn's calls are the rows its finish wrote: one user, one finish moment (every row of
    a finish gets the same created_at). Not message_id: deleting a thread sets it NULL, and
    a turn whose thread was deleted while it ran never had one; grouping by the finish
    keeps such turns whole, so the message is counted as the live rollup counted it."""
    result = await s.execute(
        select(LlmCall)
        .where(LlmCall.created_at >= day_start(first_day),
               LlmCall.created_at < day_start(last_day + dt.timedelta(days=1)))
        .order_by(LlmCall.created_at, LlmCall.user_id, LlmCall.started_at, LlmCall.id)
    )
    finishes: dict[tuple[str, dt.datetime], list[LlmCall]] = defaultdict(list)
    for call in result.scalars():
        finishes[(call.user_id, call.created_at)].append(call)
    expected: dict[RollupKey, UsageFigures] = {}
    for (user_id, finished_at), calls in finishes.items():
        _merge(expected, user_id, finished_at.astimezone(dt.UTC).date(), _turn_figures(calls))
    return expected


def _merge(
    into: dict[RollupKey, UsageFigures], user_id: str, day: dt.date,
    per_model: dict[str, UsageFigures],
) -> None:
    for model, figures in per_model.items():
        into.setdefault((user_id, day, model), UsageFigures()).add(figures)


async def stored_rollups(
    s: AsyncSession, first_day: dt.date, last_day: dt.date
) -> dict[RollupKey, UsageFigures]:
    """The daily rollup rows of [first_day, last_day] as they are."""
    result = await s.execute(
        select(UserTokenUsage).where(
            UserTokenUsage.period_type == PERIOD_DAY,
            UserTokenUsage.period_start >= first_day, UserTokenUsage.period_start <= last_day,
        )
    )
    return {(r.user_id, r.period_start, r.model): _figures_of(r) for r in result.scalars()}


async def _lock_rollups(s: AsyncSession) -> None:
    """PostgreSQL: make finishes wait while rollups are rewritten (reads still run). A finish
    that already wrote holds a row lock, so this waits for it to commit first; a finish that
    comes later adds its delta on top of the rewritten row. SQLite: BEGIN IMMEDIATE already
    serialises every writer."""
    if s.get_bind().dialect.name == "postgresql":
        await s.execute(text("LOCK TABLE user_token_usage IN EXCLUSIVE MODE"))


async def backfill_day(s: AsyncSession, day: dt.date) -> int:
    """Replace the daily rollup rows of one UTC day by the sums of its llm_calls rows;
    running it again changes nothing. Returns how many rollup rows the day now has."""
    await _lock_rollups(s)
    expected = await raw_usage(s, day, day)
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
            unpriced_call_count=f.unpriced_call_count, updated_at=now,
        )
        for (user_id, key_day, model), f in sorted(expected.items())
    )
    await s.flush()
    return len(expected)


# -- verification -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Mismatch:
    """One figure where the rollup and the raw rows disagree (None: no row on that side)."""

    user_id: str
    day: dt.date
    model: str
    field: str
    rollup: int | Decimal | None
    raw: int | Decimal | None


def _field(figures: UsageFigures | None, name: str) -> int | Decimal | None:
    if figures is None:
        return None
    value: int | Decimal | None = getattr(figures, name)
    return value


def compare(
    raw: dict[RollupKey, UsageFigures], rollup: dict[RollupKey, UsageFigures]
) -> list[Mismatch]:
    """Every differing figure; a row present on one side only differs in every field."""
    found: list[Mismatch] = []
    for key in sorted(raw.keys() | rollup.keys()):
        want, have = raw.get(key), rollup.get(key)
        for name in USAGE_FIELDS:
            if want is None or have is None or _field(want, name) != _field(have, name):
                found.append(Mismatch(*key, name, _field(have, name), _field(want, name)))
    return found


async def begin_snapshot(s: AsyncSession) -> None:
    """PostgreSQL: read the raw rows and the rollup from one snapshot (REPEATABLE READ), so a
    finish committing in between cannot show as a mismatch. Call first in the transaction."""
    if s.get_bind().dialect.name == "postgresql":
        await s.connection(execution_options={"isolation_level": "REPEATABLE READ"})


async def verify_day(s: AsyncSession, day: dt.date) -> list[Mismatch]:
    """Raw sums against the rollup for one UTC day."""
    return compare(await raw_usage(s, day, day), await stored_rollups(s, day, day))


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
