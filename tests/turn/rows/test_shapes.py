"""The opening's pure rules: where the new rows go in the thread's order, and when a daily
budget is spent. Both databases' openings follow them (PostgreSQL's in its statement)."""

from __future__ import annotations

import datetime as dt

from hypothesis import given
from hypothesis import strategies as st

from app.turn.rows.shapes import TICK, DayBudget, Refused, turn_times

MOMENTS = st.datetimes(min_value=dt.datetime(2020, 1, 1), max_value=dt.datetime(2040, 1, 1),
                       timezones=st.just(dt.UTC))


@given(MOMENTS, st.none() | MOMENTS)
def test_a_turn_comes_after_the_threads_newest_message_and_its_answer_after_it(
        now: dt.datetime, newest: dt.datetime | None) -> None:
    user_at, answer_at = turn_times(now, newest, with_user=True)
    assert user_at is not None and answer_at == user_at + TICK
    assert user_at >= now or (newest is not None and user_at == newest + TICK)
    if newest is not None:
        assert user_at > newest
    alone, answer_alone = turn_times(now, newest, with_user=False)
    assert alone is None and answer_alone == user_at


def test_a_clock_behind_the_thread_orders_the_turn_a_microsecond_after_it() -> None:
    newest = dt.datetime(2026, 11, 28, 12, 0, tzinfo=dt.UTC)
    assert turn_times(newest - dt.timedelta(hours=1), newest, with_user=True) == (
        newest + TICK, newest + 2 * TICK)
    assert turn_times(newest, newest, with_user=False) == (None, newest + TICK)


def test_a_budget_is_spent_once_either_figure_reaches_it() -> None:
    day = dt.date(2026, 11, 28)
    assert DayBudget(day, tokens=100).reached(100, 0.0)
    assert not DayBudget(day, tokens=100).reached(99, 1e9)
    assert DayBudget(day, cost_usd=0.5).reached(0, 0.5)
    assert not DayBudget(day).reached(10**12, 1e9)
    assert Refused(spent=(100, 0.0)).over_budget(DayBudget(day, tokens=100))
    assert not Refused(other_streams=3).over_budget(DayBudget(day, tokens=100))
    assert not Refused(spent=(100, 0.0)).over_budget(None)
