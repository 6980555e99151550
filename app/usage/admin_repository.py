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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Literal

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Date,
    Numeric,
    Select,
    case,
    cast,
    func,
    null,
    select,
)
from sqlalchemy.ext.asyncio import AsyncSession

from app.store.models import LlmCall, UserTokenUsage
from app.store.per_database import PerDatabase
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


@dataclass(frozen=True, slots=True)
class _Sums:
    """How a database sums costs exactly, reads the sum back, and names the UTC day of a
    timestamp: numeric on PostgreSQL; whole nano-dollars on SQLite, whose numeric column
    holds floats."""

    cost_sum: Callable[[Any], ColumnElement[Any]]
    cost_of: Callable[[Any], Decimal]
    day_of: Callable[[Any], ColumnElement[Any]]


_SUMS = PerDatabase(
    postgres=_Sums(cost_sum=lambda cost: func.sum(cost, type_=Numeric(28, 9)),
                   cost_of=lambda value: Decimal(str(value)),
                   day_of=lambda at: cast(func.timezone("UTC", at), Date)),
    sqlite=_Sums(cost_sum=lambda cost: func.sum(cast(func.round(cost * NANO), BigInteger)),
                 cost_of=lambda value: Decimal(int(value)) / NANO,
                 day_of=lambda at: func.date(at)))


@dataclass(frozen=True, slots=True)
class _Source:
    """The columns of one source: its key columns, its figures (`messages` None where the
    source has no message count) and its filter (the range, and the users when given)."""

    table: Any
    keys: dict[str, Any]
    calls: ColumnElement[Any]
    unpriced: ColumnElement[Any]
    messages: ColumnElement[Any] | None
    where: list[ColumnElement[bool]]
    sums: _Sums

    def figures(self) -> list[ColumnElement[Any]]:
        t = self.table
        tokens = [func.sum(getattr(t, name)) for name in TOKEN_FIGURES]
        cost = self.sums.cost_sum(t.cost_usd)
        messages = self.messages if self.messages is not None else null()
        return [*tokens, self.calls, self.unpriced, messages, cost]

    def total_tokens(self) -> ColumnElement[Any]:
        return func.sum(self.table.total_tokens)

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
        return self.sums.cost_of(value).quantize(COST_QUANTUM)


def _rollup(first_day: dt.date, last_day: dt.date, sums: _Sums) -> _Source:
    t = UserTokenUsage
    return _Source(
        t, {"day": t.period_start, "user": t.user_id, "model": t.model},
        calls=func.sum(t.llm_call_count), unpriced=func.sum(t.unpriced_call_count),
        messages=func.sum(t.message_count),
        where=[t.period_type == PERIOD_DAY, t.period_start >= first_day,
               t.period_start <= last_day],
        sums=sums)


def _calls(first_day: dt.date, last_day: dt.date, sums: _Sums) -> _Source:
    """llm_calls; a call's day is the UTC day of its created_at (the rollup's day)."""
    t = LlmCall
    day = sums.day_of(t.created_at)
    start = dt.datetime.combine(first_day, dt.time(), dt.UTC)
    stop = dt.datetime.combine(last_day + dt.timedelta(days=1), dt.time(), dt.UTC)
    return _Source(
        t, {"day": day, "user": t.user_id, "model": t.model, "stage": t.stage},
        calls=func.count(), unpriced=func.sum(case((t.cost_usd.is_(None), 1), else_=0)),
        messages=None, where=[t.created_at >= start, t.created_at < stop], sums=sums)


def _source(s: AsyncSession, first_day: dt.date, last_day: dt.date, *, raw_calls: bool,
            users: Sequence[str]) -> _Source:
    source = (_calls if raw_calls else _rollup)(first_day, last_day, _SUMS.of(s))
    if users:
        source.where.append(source.keys["user"].in_(list(users)))
    return source


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
    source = _source(s, first_day, last_day, raw_calls="stage" in keys, users=users)
    columns = [source.keys[k] for k in keys]
    query = _grouped(source, keys)
    if "day" in keys:
        query = query.order_by(*columns)
    else:
        query = query.order_by(source.total_tokens().desc(), *columns)
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
    source = _source(s, first_day, last_day, raw_calls="stage" in keys, users=users)
    inner = _grouped(source, keys).subquery()
    return int(await s.scalar(select(func.count()).select_from(inner)) or 0)


async def usage_totals(
    s: AsyncSession, first_day: dt.date, last_day: dt.date, *, raw_calls: bool,
    users: Sequence[str] = (),
) -> tuple[UsageFigures, int | None]:
    """The sums over every row of the range (of `users` only, when given), from the rollup
    or from llm_calls."""
    source = _source(s, first_day, last_day, raw_calls=raw_calls, users=users)
    row = (await s.execute(select(*source.figures()).where(*source.where))).one()
    return source.read(tuple(row))
