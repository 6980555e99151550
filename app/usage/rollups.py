"""Keeping the daily usage rollup honest: recompute it from the raw llm_calls rows (backfill)
or compare the two (verify).

The rollup is written incrementally as messages finish; the llm_calls rows are the record it
must add up to. Both are counted by one rule, app.usage.figures.deltas_by_model, applied here
to the rows of each finish exactly as the finish path applied it to the turn's calls, so the
two cannot disagree about how a turn is counted, even after its thread (and so its
message_id) is gone. The SQL is app.usage.reports_repository; this module decides what a day should
hold, what differs, and in which transaction each step runs.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal

from sqlalchemy.ext.asyncio import AsyncSession

from app.store.db import Database
from app.usage import reports_repository as usage_reports
from app.usage.figures import USAGE_FIELDS, RollupKey, UsageFigures, deltas_by_model
from app.usage.reports_repository import FinishedCall

DayProgress = Callable[[int, int], None]
"""Called after each day with (days done, days in the run): the scripts' progress bars."""


def expected_rollups(calls: Sequence[FinishedCall]) -> dict[RollupKey, UsageFigures]:
    """What the daily rollup should hold for these llm_calls rows. A turn's calls are the rows
    its finish wrote: one user, one finish moment (every row of a finish gets the same
    created_at), not one message_id: deleting a thread sets it NULL, and a turn whose thread
    was deleted while it ran never had one. Grouping by the finish keeps such turns whole, so
    the message is counted as the live rollup counted it."""
    finishes: dict[tuple[str, dt.datetime], list[FinishedCall]] = defaultdict(list)
    for row in calls:
        finishes[(row.user_id, row.written_at)].append(row)
    expected: dict[RollupKey, UsageFigures] = {}
    for (user_id, written_at), rows in finishes.items():
        day = written_at.astimezone(dt.UTC).date()
        for model, figures in deltas_by_model([row.call for row in rows]).items():
            expected.setdefault((user_id, day, model), UsageFigures()).add(figures)
    return expected


async def raw_usage(
    db: Database, first_day: dt.date, last_day: dt.date
) -> dict[RollupKey, UsageFigures]:
    """What the daily rollup should hold for [first_day, last_day], from the llm_calls rows.
    The day of a call is the UTC day its message was finished (llm_calls.created_at)."""
    async with db.transaction() as session:
        return expected_rollups(await usage_reports.finished_calls(session, first_day, last_day))


# -- backfill -----------------------------------------------------------------------------


async def backfill_day(db: Database, day: dt.date) -> int:
    """Replace the daily rollup rows of one UTC day by the sums of its llm_calls rows, in one
    transaction with finishes held off (usage_reports.lock_rollups); running it again changes
    nothing. Returns how many rollup rows the day now has."""
    async with db.transaction() as session:
        await usage_reports.lock_rollups(session)
        expected = expected_rollups(await usage_reports.finished_calls(session, day, day))
        await usage_reports.replace_rollup_day(session, day, expected)
    return len(expected)


async def backfill(
    db: Database, first_day: dt.date, last_day: dt.date, *, on_day: DayProgress | None = None,
) -> dict[dt.date, int]:
    """Backfill every day of [first_day, last_day], one transaction a day (a long range never
    holds the rollup lock for long); returns the rollup rows each day now has."""
    days = [first_day + dt.timedelta(days=n) for n in range((last_day - first_day).days + 1)]
    written: dict[dt.date, int] = {}
    for done, day in enumerate(days, start=1):
        written[day] = await backfill_day(db, day)
        if on_day is not None:
            on_day(done, len(days))
    return written


# -- verify -------------------------------------------------------------------------------


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


@dataclass(frozen=True, slots=True)
class Verification:
    """What `scripts/usage.py verify` reports: the days checked, every differing figure, and
    the assistant messages with no token data at all (unknown, not zero)."""

    days: list[dt.date]
    mismatches: list[Mismatch]
    messages_without_tokens: int


async def _mismatches(session: AsyncSession, day: dt.date) -> list[Mismatch]:
    raw = expected_rollups(await usage_reports.finished_calls(session, day, day))
    return compare(raw, await usage_reports.stored_rollups(session, day, day))


async def verify_day(db: Database, day: dt.date) -> list[Mismatch]:
    """Raw sums against the rollup for one UTC day, read from one snapshot."""
    async with db.transaction() as session:
        await usage_reports.begin_snapshot(session)
        return await _mismatches(session, day)


async def verify(
    db: Database, day: dt.date | None = None, *, on_day: DayProgress | None = None,
) -> Verification:
    """Raw sums against the rollup for one day, or every day with usage, all read from one
    snapshot, so a finish committing meanwhile cannot show as a difference."""
    mismatches: list[Mismatch] = []
    async with db.transaction() as session:
        await usage_reports.begin_snapshot(session)
        days = [day] if day is not None else await usage_reports.usage_days(session)
        for done, each in enumerate(days, start=1):
            mismatches += await _mismatches(session, each)
            if on_day is not None:
                on_day(done, len(days))
        untracked = await usage_reports.messages_without_token_data(session, day, day)
    return Verification(days, mismatches, untracked)
