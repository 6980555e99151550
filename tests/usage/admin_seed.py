"""Usage of seven users on three UTC days, written as the gateway writes it (the turn
repository's opening and finish, tests/store/factories.py) with the store's clock pinned per
turn, and refusals written through the refusal tally; the figures the admin report must give
are computed here from the same calls, independently of the report's SQL."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from dataclasses import dataclass, field
from decimal import Decimal

import pytest

from app.answer.records import CallRecord
from app.store.db import Database
from app.usage.refusals import RefusalTally
from tests.store import factories
from tests.usage_accounting.workload import store_clock

DAY1, DAY2, DAY3 = dt.date(2026, 11, 20), dt.date(2026, 11, 21), dt.date(2026, 11, 22)
DAYS = (DAY1, DAY2, DAY3)

#: (user, day, hour, calls): each entry is one turn.
TURNS: list[tuple[str, dt.date, int, list[CallRecord]]] = [
    ("alice", DAY1, 9, [factories.call("gpt-4o-mini", 20, 5, stage="title", cost=0.000006),
                        factories.call("gpt-4o", 1000, 200, cost=0.0045)]),
    ("alice", DAY2, 10, [factories.call("gpt-4o-mini", 3000, 150, stage="summary",
                                        cost=0.00054),
                         factories.call("gpt-4o", 900, 300, cost=0.00525)]),
    ("bob", DAY1, 15, [factories.call("gpt-4o", 100, 10, cost=0.00035)]),
    ("bob", DAY3, 16, [factories.call("local-llama", 700, 120, cost=None)]),
    ("carol", DAY3, 8, [factories.call("gpt-4o", 50, 5, cost=0.000175)]),
    ("carol", DAY3, 9, [factories.call("gpt-4o", 40, 4, cost=0.00014)]),
    # small users: the dashboard draws six users one by one and sums the rest
    *[(user, DAY2, 11, [factories.call("gpt-4o-mini", 10 + n, 2, cost=0.000003)])
      for n, user in enumerate(("dave", "erin", "frank", "grace"))],
]
#: (day, reason, how many)
REFUSALS = [(DAY1, "rate_limited", 3), (DAY2, "budget_exceeded", 2),
            (DAY3, "too_many_streams", 1), (DAY3, "rate_limited", 4)]


@dataclass
class Expected:
    """Sums of the seeded calls by any key: tokens, cost (None while unpriced), calls."""

    tokens: dict[tuple[str, ...], int] = field(default_factory=lambda: defaultdict(int))
    calls: dict[tuple[str, ...], int] = field(default_factory=lambda: defaultdict(int))
    cost: dict[tuple[str, ...], Decimal | None] = field(default_factory=dict)


def expected(*keys: str) -> Expected:
    """The seeded figures grouped by `keys` (day, user, model, stage)."""
    out = Expected()
    for user, day, _, calls in TURNS:
        for c in calls:
            values = {"day": day.isoformat(), "user": user, "model": c.model, "stage": c.stage}
            key = tuple(values[k] for k in keys)
            out.tokens[key] += c.total_tokens
            out.calls[key] += 1
            known = out.cost.get(key)
            if c.cost_usd is not None:
                out.cost[key] = (known or Decimal(0)) + Decimal(str(c.cost_usd))
            else:
                out.cost.setdefault(key, None)
    return out


async def seed(db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    for user, day, hour, calls in TURNS:
        thread = await factories.new_thread(db, user)
        moment = dt.datetime(day.year, day.month, day.day, hour, tzinfo=dt.UTC)
        with store_clock(monkeypatch, moment):
            opened = await factories.open_rows(db, thread, "question")
            await factories.finish(db, opened.assistant.id, "answer", calls=calls)
    for day, reason, count in REFUSALS:
        noon = dt.datetime(day.year, day.month, day.day, 12, tzinfo=dt.UTC)
        tally = RefusalTally(db, clock=lambda noon=noon: noon)  # type: ignore[misc]
        for _ in range(count):
            tally.count(reason)
        await tally.flush()
