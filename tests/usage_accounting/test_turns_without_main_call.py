"""A turn that ended before its main call (the client left during the title or the summary
call) is still one message in the rollup, credited to its first call's model. Its thread
deleted afterwards, or while it ran (the lost-message path), `verify` must still agree
with the live rollup and `backfill` must change nothing. Both backends, the real finish
path with the store's clock pinned."""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest

from app.answer.records import CallRecord
from app.store.db import Database
from app.threads import repository as threads_store
from app.turn.rows import turn_rows
from tests.usage_accounting.workload import (
    DAY1,
    at,
    backfill,
    call,
    finished_turn,
    new_thread,
    rollup_rows,
    store_clock,
    verify,
)


def _started(record: CallRecord, moment: dt.datetime) -> CallRecord:
    return dataclasses.replace(record, started_at=moment, first_token_at=None,
                               finished_at=moment + dt.timedelta(seconds=1))


def _left_during_title() -> list[CallRecord]:
    return [_started(call("gpt-4o-mini", 40, 0, stage="title", source="partial",
                          status="interrupted", cost=0.000006), at(DAY1, 9))]


def _left_during_summary() -> list[CallRecord]:
    """Title done, then the summary cut: neither call is `main`; the earlier one carries."""
    return [
        _started(call("gpt-4o-mini", 30, 6, stage="title", cost=0.000008), at(DAY1, 11)),
        _started(call("summarizer", 900, 0, stage="summary", source="partial",
                      status="interrupted", cost=None), at(DAY1, 11, 1)),
    ]


async def _rollups(db: Database) -> dict[tuple[str, dt.date, str], tuple[object, ...]]:
    """The rollup rows, costs at the column's scale (9 decimals): SQLite adds the live
    increments as floats, so a rewrite may drop float noise below it, and that is no change."""
    return {key: (*row[:5], None if row[5] is None else round(float(row[5]), 9), *row[6:])
            for key, row in (await rollup_rows(db)).items()}


async def _seed(db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    """Alice: an ordinary turn, then two turns that ended before their main call."""
    thread = await new_thread(db, "alice")
    await finished_turn(db, monkeypatch, thread, at(DAY1, 8),
                        [call("gpt-4o-mini", 20, 5, stage="title", cost=0.000006),
                         call("gpt-4o", 1000, 200, cost=0.0045)])
    await finished_turn(db, monkeypatch, thread, at(DAY1, 9, 30), _left_during_title(),
                        status="interrupted")
    await finished_turn(db, monkeypatch, thread, at(DAY1, 11, 2), _left_during_summary(),
                        status="interrupted")


async def test_turns_without_a_main_call_are_messages_of_their_first_calls_model(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    await _seed(db, monkeypatch)
    rows = await rollup_rows(db)
    # (total, prompt, completion, messages, calls): the ordinary turn's message is gpt-4o's
    assert rows[("alice", DAY1, "gpt-4o")][:5] == (1200, 1000, 200, 1, 1)
    # title calls: 25 + 40 + 36 tokens; the two turns without a main call are its messages
    assert rows[("alice", DAY1, "gpt-4o-mini")][:5] == (101, 90, 11, 2, 3)
    assert rows[("alice", DAY1, "summarizer")][:5] == (900, 900, 0, 0, 1)
    assert await verify(db, DAY1) == []


async def test_thread_deleted_after_such_turns_verify_clean_backfill_no_op(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    await _seed(db, monkeypatch)
    live = await _rollups(db)
    async with db.transaction() as s:
        (thread,) = await threads_store.list_threads(s, "alice")
        assert await threads_store.delete_thread(s, "alice", thread.id)
    assert await verify(db, DAY1) == []
    await backfill(db, DAY1)
    assert await _rollups(db) == live
    assert sum(figures[3] for figures in live.values()) == 3  # still three messages


async def test_thread_deleted_while_such_a_turn_ran_verify_clean_backfill_no_op(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lost-message path: no message to store, the calls billed without one
    (message_id and thread_id NULL from the start)."""
    with store_clock(monkeypatch, at(DAY1, 10)):
        await turn_rows(db).bill("bob", _left_during_summary())
    with store_clock(monkeypatch, at(DAY1, 12)):
        await turn_rows(db).bill("bob", _left_during_title())
    live = await _rollups(db)
    assert live[("bob", DAY1, "gpt-4o-mini")][:5] == (76, 70, 6, 2, 2)
    assert live[("bob", DAY1, "summarizer")][3] == 0
    assert await verify(db, DAY1) == []
    await backfill(db, DAY1)
    assert await _rollups(db) == live


async def test_a_finish_still_counts_each_main_call_once(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two of one user's turns finished in the same instant (their threads then deleted)
    are one group of rows to the recomputation: each main call still counts its message."""
    first, second = await new_thread(db, "carol"), await new_thread(db, "carol")
    for thread, model in ((first, "gpt-4o"), (second, "gpt-4o")):
        await finished_turn(db, monkeypatch, thread, at(DAY1, 14),
                            [call("gpt-4o-mini", 10, 2, stage="title"), call(model, 50, 5)])
    live = await _rollups(db)
    assert live[("carol", DAY1, "gpt-4o")][3] == 2
    async with db.transaction() as s:
        for thread in (first, second):
            assert await threads_store.delete_thread(s, "carol", thread.id)
    assert await verify(db, DAY1) == []
    await backfill(db, DAY1)
    assert await _rollups(db) == live
