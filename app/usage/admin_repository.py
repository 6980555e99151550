"""The SQL of the all-users usage report (the admin dashboard, `usage.py report`): queries only.

A report groups usage of a range of UTC days by one or two of day, user, model and stage, with
the grouping, the ordering and the paging done in the database, so a year of many users never
comes back to Python row by row. Two sources:
- the daily rollup (`user_token_usage`) for day, user and model: what the budget and the usage
  API read too;
- the raw `llm_calls` rows when the stage is asked for: the rollup has no stage. Their day is
  the UTC day of `created_at`, the day the rollup counts them on; a message is not a call's,
  so these rows have no message count.
Costs are summed exactly: numeric on PostgreSQL, whole nano-dollars on SQLite (whose numeric
column holds floats).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Literal

from sqlalchemy import BigInteger, ColumnElement, Date, Numeric, Select, case, cast, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from app.store.models import LlmCall, UserTokenUsage
from app.usage.figures import COST_QUANTUM, USAGE_FIELDS, UsageFigures
from app.usage.repository import PERIOD_DAY

GroupKey = Literal["day", "user", "model", "stage"]

#: The token figures both sources sum: every `*_tokens` figure of UsageFigures, each a column
#: of the rollup and of llm_calls under the same name. A new token figure (reasoning tokens)
#: is summed here, and shown by the API, the page and the script, once it is in
#: figures.USAGE_FIELDS and in both tables.
TOKEN_FIGURES = tuple(name for name in USAGE_FIELDS if name.endswith("_tokens"))
NANO = 1_000_000_000


@dataclass(frozen=True, slots=True)
class GroupedUsage:
    """One row of a report: its key values (in the query's key order; days as ISO dates)
    and its figures (message_count None when the rows came from llm_calls)."""

    key: tuple[str, ...]
    figures: UsageFigures
    message_count: int | None


def _postgres(s: AsyncSession) -> bool:
    return s.get_bind().dialect.name == "postgresql"


class _Source:
    """The columns of one source: its key columns, its figures, its filter (the range, and
    the users when given)."""

    def __init__(self, s: AsyncSession, first_day: dt.date, last_day: dt.date,
                 *, raw_calls: bool, users: Sequence[str] = ()) -> None:
        self.raw_calls = raw_calls
        if raw_calls:
            t: Any = LlmCall
            day = (cast(func.timezone("UTC", LlmCall.created_at), Date) if _postgres(s)
                   else func.date(LlmCall.created_at))
            self.keys: dict[str, Any] = {
                "day": day, "user": LlmCall.user_id, "model": LlmCall.model,
                "stage": LlmCall.stage}
            self.calls: ColumnElement[Any] = func.count()
            self.unpriced: ColumnElement[Any] = func.sum(
                case((LlmCall.cost_usd.is_(None), 1), else_=0))
            self.messages: ColumnElement[Any] | None = None
            start = dt.datetime.combine(first_day, dt.time(), dt.UTC)
            stop = dt.datetime.combine(last_day + dt.timedelta(days=1), dt.time(), dt.UTC)
            self.where = [LlmCall.created_at >= start, LlmCall.created_at < stop]
        else:
            t = UserTokenUsage
            self.keys = {"day": UserTokenUsage.period_start, "user": UserTokenUsage.user_id,
                         "model": UserTokenUsage.model}
            self.calls = func.sum(UserTokenUsage.llm_call_count)
            self.unpriced = func.sum(UserTokenUsage.unpriced_call_count)
            self.messages = func.sum(UserTokenUsage.message_count)
            self.where = [UserTokenUsage.period_type == PERIOD_DAY,
                          UserTokenUsage.period_start >= first_day,
                          UserTokenUsage.period_start <= last_day]
        if users:
            self.where.append(self.keys["user"].in_(list(users)))
        self.tokens = [func.sum(getattr(t, name)) for name in TOKEN_FIGURES]
        self.cost = (func.sum(t.cost_usd, type_=Numeric(28, 9)) if _postgres(s)
                     else func.sum(cast(func.round(t.cost_usd * NANO), BigInteger)))
        self.nano_cost = not _postgres(s)

    def figures(self) -> list[ColumnElement[Any]]:
        messages = self.messages if self.messages is not None else func.count()
        return [*self.tokens, self.calls, self.unpriced, messages, self.cost]

    def read(self, values: tuple[Any, ...]) -> tuple[UsageFigures, int | None]:
        """A row's figures, in the order of figures(); the message count None for llm_calls."""
        *token_sums, calls, unpriced, messages, cost = values
        counted = self.messages is not None
        figures = UsageFigures(
            **{name: int(v or 0) for name, v in zip(TOKEN_FIGURES, token_sums, strict=True)},
            llm_call_count=int(calls or 0), unpriced_call_count=int(unpriced or 0),
            message_count=int(messages or 0) if counted else 0, cost_usd=self._cost(cost))
        return figures, (int(messages or 0) if counted else None)

    def _cost(self, value: Any) -> Decimal | None:
        if value is None:
            return None
        if self.nano_cost:
            return (Decimal(int(value)) / NANO).quantize(COST_QUANTUM)
        return Decimal(str(value)).quantize(COST_QUANTUM)


def _source(s: AsyncSession, first_day: dt.date, last_day: dt.date,
            keys: tuple[GroupKey, ...], users: Sequence[str]) -> _Source:
    return _Source(s, first_day, last_day, raw_calls="stage" in keys, users=users)


def _grouped(source: _Source, keys: tuple[GroupKey, ...]) -> Select[Any]:
    columns = [source.keys[k] for k in keys]
    return select(*columns, *source.figures()).where(*source.where).group_by(*columns)


def _day_text(value: Any) -> str:
    return value.isoformat() if isinstance(value, dt.date) else str(value)


async def grouped_usage(
    s: AsyncSession, first_day: dt.date, last_day: dt.date, keys: tuple[GroupKey, ...], *,
    limit: int | None, offset: int = 0, users: Sequence[str] = (),
) -> list[GroupedUsage]:
    """Usage of [first_day, last_day] (of `users` only, when given) grouped by `keys`: by
    day in day order when the day is a key, else the largest token totals first (the top
    users); ties by the keys."""
    source = _source(s, first_day, last_day, keys, users)
    columns = [source.keys[k] for k in keys]
    query = _grouped(source, keys)
    if "day" in keys:
        query = query.order_by(*columns)
    else:
        total = source.tokens[TOKEN_FIGURES.index("total_tokens")]
        query = query.order_by(total.desc(), *columns)
    if limit is not None:
        query = query.limit(limit).offset(offset)
    rows = []
    for row in (await s.execute(query)).all():
        key = tuple(_day_text(v) if k == "day" else str(v) for k, v in zip(keys, row, strict=False))
        figures, messages = source.read(tuple(row[len(keys):]))
        rows.append(GroupedUsage(key, figures, messages))
    return rows


async def grouped_count(
    s: AsyncSession, first_day: dt.date, last_day: dt.date, keys: tuple[GroupKey, ...],
    users: Sequence[str] = (),
) -> int:
    """How many rows grouped_usage has in all (for paging)."""
    inner = _grouped(_source(s, first_day, last_day, keys, users), keys).subquery()
    return int(await s.scalar(select(func.count()).select_from(inner)) or 0)


async def usage_totals(
    s: AsyncSession, first_day: dt.date, last_day: dt.date, *, raw_calls: bool,
    users: Sequence[str] = (),
) -> tuple[UsageFigures, int | None]:
    """The sums over every row of the range (of `users` only, when given), from the rollup
    or from llm_calls."""
    source = _Source(s, first_day, last_day, raw_calls=raw_calls, users=users)
    row = (await s.execute(select(*source.figures()).where(*source.where))).one()
    return source.read(tuple(row))
