"""A mixed usage workload written through the real finish path (app.turn.rows), on
chosen UTC days: the store's clock is pinned per turn, nothing else is faked."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest
from sqlalchemy import func, select

from app.answer.records import CallRecord, FinishedMessage
from app.store.db import Database
from app.store.models import LlmCall, Thread, UserTokenUsage
from app.threads import repository as threads_store
from app.turn.rows import Opened, OpeningRequest, turn_rows
from app.turn.rows import postgres as postgres_rows
from app.turn.rows import sqlite as sqlite_rows
from app.turn.rows import statements as turn_statements
from app.usage import rollups as usage_rollups

DAY1 = dt.date(2026, 11, 20)
DAY2 = dt.date(2026, 11, 21)
DAY3 = dt.date(2026, 11, 22)


def at(day: dt.date, hour: int = 12, minute: int = 0) -> dt.datetime:
    return dt.datetime(day.year, day.month, day.day, hour, minute, tzinfo=dt.UTC)


@contextmanager
def store_clock(monkeypatch: pytest.MonkeyPatch, moment: dt.datetime) -> Iterator[None]:
    """The store's `now` (message times, llm_calls.created_at, the rollup day) is `moment`."""
    with monkeypatch.context() as patch:
        for module in (postgres_rows, sqlite_rows, turn_statements):
            patch.setattr(module, "utcnow", lambda: moment)
        yield


def call(model: str, prompt: int, completion: int, *, stage: str = "main",
         source: str = "provider", cost: float | None = 0.001, status: str = "complete",
         reasoning: int | None = None) -> CallRecord:
    started = at(DAY1)
    return CallRecord(
        stage=stage, model=model, prompt_tokens=prompt, completion_tokens=completion,
        cost_usd=cost,
        usage_source=source,  # type: ignore[arg-type]
        started_at=started, first_token_at=started + dt.timedelta(milliseconds=300),
        finished_at=started + dt.timedelta(seconds=2), status=status,
        reasoning_tokens=reasoning,
    )


async def finished_turn(
    db: Database, monkeypatch: pytest.MonkeyPatch, thread: Thread, moment: dt.datetime,
    calls: list[CallRecord], *, status: str = "complete",
    metadata: dict[str, object] | None = None,
) -> None:
    """A user message, an assistant message opened and finished at `moment` (UTC)."""
    rows = turn_rows(db)
    with store_clock(monkeypatch, moment):
        opened = await rows.open(OpeningRequest(thread.user_id, thread.id, "question"))
        assert isinstance(opened, Opened), opened
        meta = metadata if metadata is not None else {
            "tokens": sum(c.total_tokens for c in calls)}
        await rows.finish(
            FinishedMessage(opened.assistant.id, "answer", meta, status, calls),  # type: ignore[arg-type]
        )


@dataclass
class Workload:
    threads: dict[str, Thread]
    expected_tokens: dict[tuple[str, dt.date, str], int]


async def new_thread(db: Database, user_id: str) -> Thread:
    async with db.transaction() as s:
        return await threads_store.create_thread(s, user_id, None)


async def mixed_workload(db: Database, monkeypatch: pytest.MonkeyPatch) -> Workload:
    """Two users, three days (one turn at 23:59:59 and one at 00:00 the next day), title and
    summary calls on other models, provider / estimated / partial usage, an unpriced model,
    a failed turn without calls and an interrupted one."""
    alice, alice2, bob = (await new_thread(db, "alice"), await new_thread(db, "alice"),
                          await new_thread(db, "bob"))
    turns: list[tuple[Thread, dt.datetime, list[CallRecord], str]] = [
        (alice, at(DAY1, 9), [call("gpt-4o-mini", 20, 5, stage="title", cost=0.000006),
                              call("gpt-4o", 1000, 200, cost=0.0045, reasoning=150)],
         "complete"),
        (alice, at(DAY1, 10), [call("gpt-4o", 1500, 0, source="estimated", cost=0.00375)],
         "complete"),
        (alice, dt.datetime(2026, 11, 20, 23, 59, 59, tzinfo=dt.UTC),
         [call("gpt-4o", 800, 33, source="partial", cost=0.00233, status="interrupted")],
         "interrupted"),
        (alice, at(DAY2, 0), [call("gpt-4o-mini", 3000, 150, stage="summary", cost=0.00054),
                              call("gpt-4o", 900, 300, cost=0.00525)], "complete"),
        (alice2, at(DAY2, 8), [call("gpt-4o-mini", 10, 4, stage="title", cost=0.0000039),
                               call("local-llama", 700, 120, cost=None)], "complete"),
        (alice2, at(DAY3, 7), [call("local-llama", 600, 90, source="estimated", cost=None)],
         "complete"),
        (alice2, at(DAY3, 8), [], "failed"),
        (bob, at(DAY1, 15), [call("gpt-4o", 100, 10, cost=0.00035)], "complete"),
        (bob, at(DAY3, 16), [call("gpt-4o", 200, 20, cost=0.0007),
                             call("gpt-4o", 50, 5, stage="summary", cost=0.000175,
                                  reasoning=3)], "complete"),
    ]
    expected: dict[tuple[str, dt.date, str], int] = {}
    for thread, moment, calls, status in turns:
        await finished_turn(db, monkeypatch, thread, moment, calls, status=status,
                            metadata=None if calls else {})
        for c in calls:
            key = (thread.user_id, moment.date(), c.model)
            expected[key] = expected.get(key, 0) + c.total_tokens
    return Workload({"alice": alice, "alice2": alice2, "bob": bob}, expected)


async def rollup_rows(db: Database) -> dict[tuple[str, dt.date, str], tuple[object, ...]]:
    """Every daily rollup row's figures, by (user, day, model)."""
    async with db.transaction() as s:
        rows = (await s.execute(select(UserTokenUsage))).scalars().all()
    return {
        (r.user_id, r.period_start, r.model): (
            r.total_tokens, r.prompt_tokens, r.completion_tokens, r.message_count,
            r.llm_call_count, r.cost_usd, r.unpriced_call_count, r.reasoning_tokens)
        for r in rows
    }


async def llm_call_count(db: Database) -> int:
    async with db.transaction() as s:
        return int(await s.scalar(select(func.count()).select_from(LlmCall)) or 0)


async def verify(db: Database, day: dt.date) -> list[usage_rollups.Mismatch]:
    """What `scripts/usage.py verify --day DAY` reports (one snapshot, as the script reads)."""
    return await usage_rollups.verify_day(db, day)


async def backfill(db: Database, *days: dt.date) -> None:
    """What `scripts/usage.py backfill` does: each day rewritten in its own transaction."""
    for day in days:
        await usage_rollups.backfill_day(db, day)
