"""The all-users usage report: what the admin dashboard draws and `usage.py report` prints.

Usage of a range of UTC days (the same range rules as the usage API: app.usage.reports),
grouped by one or two of day, user, model and stage, a page of rows at a time, with the totals
of the whole range; and the refused turn requests of the range per day and reason. The answer
shapes and the CSV are decided here, once, for the API and the script. docs/admin.md says
what each figure means.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, cast, get_args

from app.config.catalog import ModelSpec
from app.core.user_ids import user_id_problem
from app.store.db import Database
from app.usage import admin_repository as admin_store
from app.usage import refusals_repository as refusal_store
from app.usage.admin_repository import GroupedUsage, GroupKey
from app.usage.figures import UsageFigures
from app.usage.reports import InvalidUsageQuery, UsageQuery, date_range

GROUP_KEYS: tuple[GroupKey, ...] = get_args(GroupKey)
#: A key's column in the answer's rows.
KEY_FIELDS: dict[GroupKey, str] = {"day": "day", "user": "user_id", "model": "model",
                                   "stage": "stage"}
DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
MAX_KEYS = 2
#: Users one query may name (`user_id=` repeated): the dashboard's per-user chart asks for
#: the days of its top users only, instead of every (day, user) row of a busy year.
MAX_USERS = 20


def group_keys(raw: str | None) -> tuple[GroupKey, ...]:
    """`day`, `user,model`, ...: one or two distinct keys, comma-separated; `day` when absent."""
    names = tuple(name.strip() for name in (raw or "day").split(","))
    if not all(name in GROUP_KEYS for name in names):
        raise InvalidUsageQuery(
            "invalid_query", "'group_by' must be one or two of day, user, model, stage, "
                             "separated by a comma")
    if len(set(names)) != len(names) or len(names) > MAX_KEYS:
        raise InvalidUsageQuery("invalid_query",
                                "'group_by' takes at most two different keys")
    return cast(tuple[GroupKey, ...], names)


def page_bounds(limit: int | None, offset: int | None) -> tuple[int, int]:
    """The page asked for: `limit` rows from 1 to MAX_LIMIT (DEFAULT_LIMIT when absent)
    after skipping `offset` rows (0 or more)."""
    limit = DEFAULT_LIMIT if limit is None else limit
    if not 1 <= limit <= MAX_LIMIT:
        raise InvalidUsageQuery("invalid_query", f"'limit' must be from 1 to {MAX_LIMIT}")
    if offset is not None and offset < 0:
        raise InvalidUsageQuery("invalid_query", "'offset' must not be negative")
    return limit, offset or 0


def chosen_users(values: list[str]) -> tuple[str, ...]:
    """The users a query is limited to (none: every user), each a possible user id."""
    if len(values) > MAX_USERS:
        raise InvalidUsageQuery("invalid_query", f"at most {MAX_USERS} 'user_id' values")
    for value in values:
        problem = user_id_problem(value)
        if problem is not None:
            raise InvalidUsageQuery("invalid_user_id", f"'user_id' is not valid: {problem}")
    return tuple(dict.fromkeys(values))


@dataclass(frozen=True, slots=True)
class AdminUsageQuery:
    """A parsed report query; `limit` None means every row (the script, the CSV download);
    `users` limits rows and totals to those users (empty: every user); `model_names` are
    the catalog's names of upstream ids (model_names), which the rows' `model` shows."""

    start: dt.date | None = None
    end: dt.date | None = None
    group_by: tuple[GroupKey, ...] = ("day",)
    limit: int | None = DEFAULT_LIMIT
    offset: int = 0
    users: tuple[str, ...] = ()
    model_names: tuple[tuple[str, str], ...] = ()


def model_names(specs: Iterable[ModelSpec]) -> tuple[tuple[str, str], ...]:
    """Each upstream id (what llm_calls and the rollup record) with the catalog's name of
    it (what a user picks and the page shows), for the ids exactly one name stands for: an
    id two names share, or one the catalog no longer has, is shown as it is. One id, one
    name: renaming the rows groups them by name without merging any."""
    names: dict[str, set[str]] = {}
    for spec in specs:
        names.setdefault(spec.model_id, set()).add(spec.name)
    return tuple(sorted((model_id, next(iter(found))) for model_id, found in names.items()
                        if len(found) == 1))


def _today() -> dt.date:
    return dt.datetime.now(dt.UTC).date()


def _figures_json(figures: UsageFigures, messages: int | None) -> dict[str, Any]:
    """A row's figures; message_count null for rows read from llm_calls (per stage)."""
    return {**figures.as_dict(), "message_count": messages}


def _row_json(keys: tuple[GroupKey, ...], row: GroupedUsage, names: Mapping[str, str]
              ) -> dict[str, Any]:
    named = {KEY_FIELDS[k]: names.get(value, value) if k == "model" else value
             for k, value in zip(keys, row.key, strict=True)}
    return {**named, **_figures_json(row.figures, row.message_count)}


async def usage_report(
    db: Database, query: AdminUsageQuery, *, today: dt.date | None = None
) -> dict[str, Any]:
    """Every user's usage of the query's days, grouped and paged, JSON-ready."""
    start, end = date_range(UsageQuery(query.start, query.end), today or _today())
    keys, users = query.group_by, query.users
    raw_calls = "stage" in keys
    async with db.transaction() as session:
        rows = await admin_store.grouped_usage(session, start, end, keys, limit=query.limit,
                                               offset=query.offset, users=users)
        if query.limit is None or (query.offset == 0 and len(rows) < query.limit):
            total_rows = len(rows)  # all of them came: no second scan to count them
        else:
            total_rows = await admin_store.grouped_count(session, start, end, keys, users)
        totals, messages = await admin_store.usage_totals(session, start, end,
                                                          raw_calls=raw_calls, users=users)
    following = query.offset + len(rows)
    return {
        "start": start.isoformat(), "end": end.isoformat(), "group_by": list(keys),
        "user_ids": list(users), "source": "llm_calls" if raw_calls else "rollup",
        "totals": _figures_json(totals, messages),
        "rows": [_row_json(keys, row, dict(query.model_names)) for row in rows],
        "page": {"offset": query.offset, "limit": query.limit, "total_rows": total_rows,
                 "next_offset": following if following < total_rows else None},
    }


async def refusal_report(
    db: Database, start: dt.date | None, end: dt.date | None, *, today: dt.date | None = None,
) -> dict[str, Any]:
    """The refused turn requests of the days, per day and reason, and per reason in all.
    At most a few reasons a day over at most MAX_DAYS days: one answer, no pages."""
    first, last = date_range(UsageQuery(start, end), today or _today())
    async with db.transaction() as session:
        counts = await refusal_store.refusals_between(session, first, last)
    totals: Counter[str] = Counter()
    for (_, reason), n in counts.items():
        totals[reason] += n
    return {
        "start": first.isoformat(), "end": last.isoformat(),
        "totals": dict(sorted(totals.items())), "total": sum(totals.values()),
        "rows": [{"day": day.isoformat(), "reason": reason, "refusal_count": n}
                 for (day, reason), n in counts.items()],
    }


def rows_csv(fields: list[str], rows: list[dict[str, Any]]) -> str:
    """Rows as CSV with a header of `fields` (a null is an empty cell: unknown, not 0)."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    writer.writerows({k: "" if row.get(k) is None else row[k] for k in fields} for row in rows)
    return out.getvalue()


def usage_csv(answer: dict[str, Any]) -> str:
    """A usage_report answer's rows as CSV: the key columns, then the figures."""
    keys = cast(list[GroupKey], answer["group_by"])
    return rows_csv([KEY_FIELDS[k] for k in keys] + list(answer["totals"]), answer["rows"])


def refusals_csv(answer: dict[str, Any]) -> str:
    """A refusal_report answer's rows as CSV."""
    return rows_csv(["day", "reason", "refusal_count"], answer["rows"])
