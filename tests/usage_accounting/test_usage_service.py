"""The usage report service: which days a query covers (the rules a user notices in the
answer's `start`/`end` or as a 422) and the answer over a real database (both backends)."""

from __future__ import annotations

import datetime as dt

import pytest

from app.store.db import Database
from app.usage.reports import (
    InvalidUsageQuery,
    UsageQuery,
    date_range,
    usage_for,
    usage_of_user,
)
from tests.usage_accounting.workload import DAY2, DAY3, mixed_workload

TODAY = dt.date(2026, 11, 22)


@pytest.mark.parametrize(("query", "days"), [
    (UsageQuery(), (dt.date(2026, 10, 24), TODAY)),  # 30 days ending today
    (UsageQuery(end=dt.date(2026, 1, 30)), (dt.date(2026, 1, 1), dt.date(2026, 1, 30))),
    (UsageQuery(start=dt.date(2026, 11, 1)), (dt.date(2026, 11, 1), TODAY)),
    (UsageQuery(start=TODAY, end=TODAY), (TODAY, TODAY)),
    (UsageQuery(start=dt.date(2025, 11, 22)), (dt.date(2025, 11, 22), TODAY)),  # 366 days
    # the default start never falls before the first day there is
    (UsageQuery(end=dt.date(1, 1, 5)), (dt.date(1, 1, 1), dt.date(1, 1, 5))),
])
def test_date_range(query: UsageQuery, days: tuple[dt.date, dt.date]) -> None:
    assert date_range(query, TODAY) == days


@pytest.mark.parametrize("query", [
    UsageQuery(start=dt.date(2026, 11, 23)),                       # after today's end
    UsageQuery(start=dt.date(2025, 11, 21)),                       # 367 days
    UsageQuery(start=dt.date(2020, 1, 1), end=dt.date(2026, 1, 1)),
    UsageQuery(end=dt.date.max),                                   # no day after it
])
def test_refused_ranges(query: UsageQuery) -> None:
    with pytest.raises(InvalidUsageQuery) as refused:
        date_range(query, TODAY)
    assert refused.value.code == "invalid_query" and refused.value.message


async def test_answer_over_the_default_range(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    await mixed_workload(db, monkeypatch)
    by_model = await usage_for(db, "alice", UsageQuery(group_by="model"), today=DAY3)
    assert (by_model["start"], by_model["end"]) == ("2026-10-24", DAY3.isoformat())
    assert [row["model"] for row in by_model["rows"]] == ["gpt-4o", "gpt-4o-mini", "local-llama"]
    assert by_model["totals"]["message_count"] == 6
    assert by_model["messages"]["message_count"] == 7  # the failed turn without calls too
    day2 = await usage_of_user(db, "alice", UsageQuery(DAY2, DAY2))
    assert [row["day"] for row in day2["rows"]] == [DAY2.isoformat()]
    assert day2["user_id"] == "alice" and day2["group_by"] == "day"


@pytest.mark.parametrize(("user_id", "code"), [
    (None, "invalid_query"), ("", "invalid_query"), ("   ", "invalid_query"),
    ("x" * 256, "invalid_user_id"), ("a\x00b", "invalid_user_id"),
    ("\ud800", "invalid_user_id"), ("esc\x1b", "invalid_user_id"),
])
async def test_admin_query_needs_a_possible_user_id(
    db: Database, user_id: str | None, code: str
) -> None:
    with pytest.raises(InvalidUsageQuery) as refused:
        await usage_of_user(db, user_id, UsageQuery())
    assert refused.value.code == code
