"""Usage reports as the API answers them: which days a query covers and the answer's shape.

The routes (app/usage/endpoints.py) turn query strings into typed values; the rules a user notices
(the 30-day default, the 366-day limit, a reversed range refused) and the JSON-ready answer
are decided here, once, so the handler stays a parser and a renderer.

The answer is `{user_id, start, end, group_by, totals, rows, messages}`: totals and rows from
the daily rollup (every upstream call), `messages` from get_user_token_usage (the assistant
messages created in the range). docs/usage.md says what each figure means.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from app.core.clock import iso_utc
from app.core.user_ids import user_id_problem
from app.store.db import Database
from app.usage import reports_repository as usage_reports
from app.usage.figures import RollupKey, UsageFigures
from app.usage.reports_repository import MessageUsage

GroupBy = Literal["day", "model"]

DEFAULT_DAYS = 30
MAX_DAYS = 366


class InvalidUsageQuery(ValueError):
    """A usage query the rules refuse; `code` is the stable error code the API answers."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True, slots=True)
class UsageQuery:
    """A parsed usage query; None days mean "the default" (decided by `date_range`)."""

    start: dt.date | None = None
    end: dt.date | None = None
    group_by: GroupBy = "day"


def date_range(query: UsageQuery, today: dt.date) -> tuple[dt.date, dt.date]:
    """The inclusive UTC days a query covers: by default the 30 days ending `end` (today
    unless given); refused when reversed or longer than a year, so one request never scans
    an unbounded history."""
    end = query.end or today
    if end == dt.date.max:  # the store's bound is the day after `end`, which must exist
        raise InvalidUsageQuery("invalid_query",
                                f"'end' must be before {dt.date.max.isoformat()}")
    # Clamped at the first day there is: `end=0001-01-05` must be a 422 or a report, not a 500.
    start = query.start or dt.date.fromordinal(max(1, end.toordinal() - (DEFAULT_DAYS - 1)))
    if start > end:
        raise InvalidUsageQuery("invalid_query", "'start' must not be after 'end'")
    if (end - start).days + 1 > MAX_DAYS:
        raise InvalidUsageQuery("invalid_query", f"the range may span at most {MAX_DAYS} days")
    return start, end


def check_user_id(value: str | None) -> str:
    """The user an admin asks about. Missing or blank is a query without its required
    parameter; a value no stored user id can have (over 255 characters, a control character
    such as NUL, which PostgreSQL refuses outright) is refused here, as bad input, instead of
    reaching the database and failing there as a 500."""
    if value is None or not value.strip():
        raise InvalidUsageQuery("invalid_query", "'user_id' is required")
    problem = user_id_problem(value)
    if problem is not None:
        raise InvalidUsageQuery("invalid_user_id", f"'user_id' is not valid: {problem}")
    return value


@dataclass(slots=True)
class UsageReport:
    """A user's usage over whole UTC days [start, end]: totals and one row per day or model."""

    user_id: str
    start: dt.date
    end: dt.date
    group_by: GroupBy
    totals: UsageFigures = field(default_factory=UsageFigures)
    rows: dict[str, UsageFigures] = field(default_factory=dict)


def summed_report(
    user_id: str, start: dt.date, end: dt.date, group_by: GroupBy,
    rollups: Mapping[RollupKey, UsageFigures],
) -> UsageReport:
    """The rollup rows summed per day (ISO date key) or per model, rows in (day, model)
    order, so a model's row comes where it is first used."""
    report = UsageReport(user_id, start, end, group_by)
    for (_, day, model), figures in sorted(rollups.items(), key=lambda kv: kv[0][1:]):
        key = day.isoformat() if group_by == "day" else model
        report.rows.setdefault(key, UsageFigures()).add(figures)
        report.totals.add(figures)
    return report


async def usage_report(
    db: Database, user_id: str, start: dt.date, end: dt.date, group_by: GroupBy
) -> UsageReport:
    """The user's daily rollup over [start, end] inclusive, summed by `group_by`."""
    async with db.transaction() as session:
        rollups = await usage_reports.stored_rollups(session, start, end, user_id=user_id)
    return summed_report(user_id, start, end, group_by, rollups)


async def usage_for(
    db: Database, user_id: str, query: UsageQuery, *, today: dt.date | None = None
) -> dict[str, Any]:
    """One user's usage over the query's days, JSON-ready (`today` defaults to the UTC
    day now: rollup days are UTC days)."""
    start, end = date_range(query, today or dt.datetime.now(dt.UTC).date())
    async with db.transaction() as session:
        rollups = await usage_reports.stored_rollups(session, start, end, user_id=user_id)
        messages = await usage_reports.get_user_token_usage(
            session, user_id, usage_reports.day_start(start),
            usage_reports.day_start(end + dt.timedelta(days=1)),
        )
    return report_json(summed_report(user_id, start, end, query.group_by, rollups), messages)


async def usage_of_user(db: Database, user_id: str | None, query: UsageQuery) -> dict[str, Any]:
    """Any user's usage (the admin route): the asked-for user id is checked first."""
    return await usage_for(db, check_user_id(user_id), query)


def report_json(report: UsageReport, messages: MessageUsage) -> dict[str, Any]:
    key = report.group_by
    return {
        "user_id": report.user_id,
        "start": report.start.isoformat(),
        "end": report.end.isoformat(),
        "group_by": key,
        "totals": report.totals.as_dict(),
        "rows": [{key: name, **figures.as_dict()} for name, figures in report.rows.items()],
        "messages": _messages_json(messages),
    }


def _messages_json(usage: MessageUsage) -> dict[str, Any]:
    return {
        "total_tokens": usage.total_tokens,
        "message_count": usage.message_count,
        "conversation_count": usage.conversation_count,
        "first_message": iso_utc(usage.first_message) if usage.first_message else None,
        "last_message": iso_utc(usage.last_message) if usage.last_message else None,
    }
