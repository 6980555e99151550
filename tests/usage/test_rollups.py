"""app.usage.rollups: the daily rollup equals the raw llm_calls sums; backfill
recomputes it idempotently and repairs it; verify finds every drift. Both backends, real
databases, the real finish path."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from sqlalchemy import delete, select, update

from app.store.db import Database
from app.store.models import LlmCall, UserTokenUsage
from app.threads import repository as threads_store
from app.usage import reports_repository as usage_reports
from app.usage import rollups as usage_rollups
from app.usage.figures import USAGE_FIELDS, UsageFigures
from app.usage.reports_repository import FinishedCall
from tests.usage_accounting.workload import (
    DAY1,
    DAY2,
    DAY3,
    at,
    backfill,
    call,
    finished_turn,
    llm_call_count,
    mixed_workload,
    new_thread,
    rollup_rows,
    verify,
)

ALL_DAYS = (DAY1, DAY2, DAY3)


async def test_rollup_equals_raw_after_a_mixed_workload(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    workload = await mixed_workload(db, monkeypatch)
    rows = await rollup_rows(db)
    assert {k: v[0] for k, v in rows.items()} == workload.expected_tokens
    for day in ALL_DAYS:
        assert await verify(db, day) == []

    # spot checks a user would notice on the bill
    total, _, _, messages, calls, cost, unpriced, reasoning = rows[("alice", DAY1, "gpt-4o")]
    # 3 main calls on day 1 (provider, estimated, partial at 23:59:59), one that reasoned
    assert (total, messages, calls, unpriced, reasoning) == (3533, 3, 3, 0, 150)
    assert cost == pytest.approx(0.0045 + 0.00375 + 0.00233)
    # the title call is counted (tokens, a call) but its turn is credited to the main model
    assert rows[("alice", DAY1, "gpt-4o-mini")][:5] == (25, 20, 5, 0, 1)
    # the turn at 00:00 belongs to day 2: its summary call plus the other thread's title call
    assert rows[("alice", DAY2, "gpt-4o-mini")][:5] == (3150 + 14, 3010, 154, 0, 2)
    # an unpriced model: cost stays NULL, never 0, and the calls missing from it are counted
    llama = rows[("alice", DAY2, "local-llama")]
    assert llama[5] is None and llama[6] == 1 and llama[3] == 1
    assert rows[("alice", DAY3, "local-llama")][5] is None
    # one message with a main and a summary call on the same model counts once
    assert rows[("bob", DAY3, "gpt-4o")][:5] == (275, 250, 25, 1, 2)
    assert rows[("bob", DAY3, "gpt-4o")][7] == 3 and rows[("bob", DAY1, "gpt-4o")][7] == 0
    # the failed turn without calls added nothing: day 3 of alice is the one estimated turn
    assert [k for k in rows if k[:2] == ("alice", DAY3)] == [("alice", DAY3, "local-llama")]
    assert rows[("alice", DAY3, "local-llama")][3] == 1


async def test_backfill_is_idempotent(db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    await mixed_workload(db, monkeypatch)
    live = await rollup_rows(db)
    await backfill(db, *ALL_DAYS)
    once = await rollup_rows(db)
    await backfill(db, *ALL_DAYS)
    twice = await rollup_rows(db)
    assert once == twice
    # and the recomputation agrees with what the finish path wrote, figure for figure
    assert once == live


async def test_backfill_repairs_deleted_and_tampered_rollups(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    await mixed_workload(db, monkeypatch)
    good = await rollup_rows(db)
    async with db.transaction() as s:
        await s.execute(delete(UserTokenUsage).where(UserTokenUsage.period_start == DAY1))
        await s.execute(update(UserTokenUsage)
                        .where(UserTokenUsage.period_start == DAY2)
                        .values(total_tokens=UserTokenUsage.total_tokens + 7, cost_usd=None))
        s.add(UserTokenUsage(user_id="mallory", period_type="day", period_start=DAY3,
                             model="gpt-4o", total_tokens=10**6, prompt_tokens=0,
                             completion_tokens=0, message_count=1, llm_call_count=1,
                             cost_usd=1.0, unpriced_call_count=0, updated_at=at(DAY3)))
    assert await rollup_rows(db) != good
    await backfill(db, *ALL_DAYS)
    assert await rollup_rows(db) == good


async def test_verify_names_each_tampered_figure(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    await mixed_workload(db, monkeypatch)
    async with db.transaction() as s:
        await s.execute(update(UserTokenUsage)
                        .where(UserTokenUsage.user_id == "bob",
                               UserTokenUsage.period_start == DAY3)
                        .values(completion_tokens=UserTokenUsage.completion_tokens - 1,
                                cost_usd=UserTokenUsage.cost_usd + 0.000000001,
                                reasoning_tokens=0))
        await s.execute(delete(UserTokenUsage).where(UserTokenUsage.user_id == "alice",
                                                     UserTokenUsage.period_start == DAY1,
                                                     UserTokenUsage.model == "gpt-4o-mini"))
    assert await verify(db, DAY2) == []
    day3 = await verify(db, DAY3)
    assert {(m.user_id, m.model, m.field, m.rollup, m.raw) for m in day3} == {
        ("bob", "gpt-4o", "completion_tokens", 24, 25),
        ("bob", "gpt-4o", "cost_usd", Decimal("0.000875001"), Decimal("0.000875000")),
        ("bob", "gpt-4o", "reasoning_tokens", 0, 3),
    }
    day1 = await verify(db, DAY1)
    assert {m.field for m in day1} == set(USAGE_FIELDS)
    assert all(m.rollup is None and m.model == "gpt-4o-mini" for m in day1)


async def test_verify_catches_a_raw_row_missing_from_the_rollup(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The other direction: a call recorded without its rollup increment."""
    await mixed_workload(db, monkeypatch)
    async with db.transaction() as s:
        source = (await s.execute(select(LlmCall).where(LlmCall.user_id == "bob")
                                  .limit(1))).scalar_one()
        s.add(LlmCall(user_id="bob", message_id=None, thread_id=None, stage="title",
                      model="gpt-4o", prompt_tokens=3, completion_tokens=2, total_tokens=5,
                      cost_usd=None, usage_source="provider", started_at=source.started_at,
                      status="complete", created_at=source.created_at))
    mismatched = {(m.field, m.rollup, m.raw) for m in await verify(db, DAY1)}
    assert ("total_tokens", 110, 115) in mismatched
    assert ("unpriced_call_count", 0, 1) in mismatched
    assert not any(field == "message_count" for field, _, _ in mismatched)


async def test_usage_outlives_a_deleted_thread(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Deleting a thread deletes its messages; the llm_calls rows stay (message_id NULL) and
    still add up to the rollup, message counts included (one main call a turn)."""
    workload = await mixed_workload(db, monkeypatch)
    before = await rollup_rows(db)
    calls_before = await llm_call_count(db)
    async with db.transaction() as s:
        assert await threads_store.delete_thread(s, "alice", workload.threads["alice"].id)
    assert await llm_call_count(db) == calls_before
    for day in ALL_DAYS:
        assert await verify(db, day) == []
    await backfill(db, *ALL_DAYS)
    assert await rollup_rows(db) == before


async def test_verify_every_day_from_one_snapshot(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    await mixed_workload(db, monkeypatch)
    thread = await new_thread(db, "carol")
    await finished_turn(db, monkeypatch, thread, at(DAY2, 9), [], metadata={"model": "old"})
    progress: list[tuple[int, int]] = []
    result = await usage_rollups.verify(db, on_day=lambda *seen: progress.append(seen))
    assert result.days == list(ALL_DAYS) and result.mismatches == []
    assert result.messages_without_tokens == 2  # and the failed turn of the workload
    assert progress == [(1, 3), (2, 3), (3, 3)]
    one_day = await usage_rollups.verify(db, DAY1)
    assert (one_day.days, one_day.messages_without_tokens) == ([DAY1], 0)


async def test_backfill_a_range_day_by_day(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    await mixed_workload(db, monkeypatch)
    live = await rollup_rows(db)
    progress: list[tuple[int, int]] = []
    written = await usage_rollups.backfill(
        db, DAY1, DAY3 + dt.timedelta(days=1), on_day=lambda *seen: progress.append(seen))
    assert written == {day: sum(1 for key in live if key[1] == day) for day in ALL_DAYS} | {
        DAY3 + dt.timedelta(days=1): 0}
    assert progress == [(1, 4), (2, 4), (3, 4), (4, 4)]
    assert await rollup_rows(db) == live


async def test_raw_usage_is_what_the_live_rollup_holds(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    await mixed_workload(db, monkeypatch)
    raw = await usage_rollups.raw_usage(db, DAY1, DAY3)
    async with db.transaction() as s:
        assert raw == await usage_reports.stored_rollups(s, DAY1, DAY3)
    assert raw[("bob", DAY3, "gpt-4o")].message_count == 1  # main + summary: one message


def test_expected_rollups_count_each_finish_as_one_turn() -> None:
    """Rows are grouped by (user, finish moment), never by message: two finishes of one user
    at different moments are two messages, and a turn that ended during its title call is
    still one message, carried by that call."""
    moment = at(DAY1, 9)
    later = moment + dt.timedelta(seconds=1)
    rows = [
        FinishedCall("u", moment, call("mini", 5, 1, stage="title", cost=0.25)),
        FinishedCall("u", moment, call("big", 10, 2, cost=None)),
        FinishedCall("u", later, call("mini", 3, 0, stage="title", cost=0.5)),
        FinishedCall("v", moment, call("big", 1, 1, cost=0.125)),
    ]
    expected = usage_rollups.expected_rollups(rows)
    assert expected == {
        ("u", DAY1, "mini"): UsageFigures(9, 8, 1, 1, 2, Decimal("0.75"), 0),
        ("u", DAY1, "big"): UsageFigures(12, 10, 2, 1, 1, None, 1),
        ("v", DAY1, "big"): UsageFigures(2, 1, 1, 1, 1, Decimal("0.125"), 0),
    }


def test_compare_names_a_row_missing_on_either_side() -> None:
    have = UsageFigures(total_tokens=3, llm_call_count=1)
    found = usage_rollups.compare({("u", DAY1, "m"): have}, {("u", DAY2, "m"): have})
    assert {(m.day, m.field, m.rollup, m.raw) for m in found if m.field == "total_tokens"} == {
        (DAY1, "total_tokens", None, 3), (DAY2, "total_tokens", 3, None)}
    assert len(found) == 2 * len(USAGE_FIELDS)
    assert usage_rollups.compare({("u", DAY1, "m"): have}, {("u", DAY1, "m"): have}) == []
