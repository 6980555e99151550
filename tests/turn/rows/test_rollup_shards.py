"""The day's rollup in shards: a process's finishes take the shards in turn, every reader
(verify, the budget, the admin reports) sees their sum, and a finish never waits on another
shard's row, which a finish of the same user running at the same time holds until its
commit (the one row a user had made all of that user's finishes take turns)."""

from __future__ import annotations

import asyncio
from decimal import Decimal

from sqlalchemy import select

from app.answer.records import CallRecord, FinishedMessage
from app.core.clock import utcnow
from app.store.db import Database
from app.store.models import Thread, UserTokenUsage
from app.turn.rows import turn_rows
from app.usage import admin_repository as admin
from app.usage import reports_repository as usage_reports
from app.usage.repository import usage_of_day, utc_day
from app.usage.rollups import verify_day
from app.usage.shards import RollupShards
from tests.store.factories import call, new_thread, open_rows
from tests.support.databases import postgres_only
from tests.support.locks import a_lock_is_awaited, held, until_a_lock_is_awaited
from tests.support.waits import until


async def finished_on(db: Database, shard: int, thread: Thread, calls: list[CallRecord]
                      ) -> None:
    """One turn of `thread` finished by a new turn repository, whose first shard is `shard`."""
    opened = await open_rows(db, thread, "q")
    await turn_rows(db, RollupShards(shard)).finish(
        FinishedMessage(opened.assistant.id, "a", {}, "complete", calls))


async def test_finishes_on_two_shards_are_one_rollup_to_every_reader(db: Database) -> None:
    thread = await new_thread(db)
    await finished_on(db, 3, thread, [call("gpt-4o", 100, 50, cost=0.25)])
    await finished_on(db, 5, thread, [call("gpt-4o", 10, 5, cost=0.5)])
    day = utc_day(utcnow())
    async with db.transaction(read_only=True) as s:
        shards = sorted((row.shard, row.total_tokens)
                        for row in (await s.execute(select(UserTokenUsage))).scalars())
        [(key, figures)] = (await usage_reports.stored_rollups(s, day, day)).items()
        spent = await usage_of_day(s, "alice", day)
        [grouped] = await admin.grouped_usage(s, day, day, ("user", "model"), limit=None)
    assert shards == [(3, 150), (5, 15)]
    assert key == ("alice", day, "gpt-4o")
    assert (figures.total_tokens, figures.message_count, figures.llm_call_count,
            figures.cost_usd) == (165, 2, 2, Decimal("0.75"))
    assert spent == (165, 0.75)
    assert grouped.key == ("alice", "gpt-4o") and grouped.figures.total_tokens == 165
    assert grouped.message_count == 2
    assert await verify_day(db, day) == []


@postgres_only("SQLite serialises write transactions; row locks are PostgreSQL's")
async def test_a_finish_never_waits_on_another_shards_row(db: Database,
                                                         database_url: str) -> None:
    """Shard 1's row held by an open transaction (a finish of the same user, not yet
    committed): a finish on shard 2 completes meanwhile; one on shard 1 waits for it, as
    every finish of the user did when the user had one row."""
    thread = await new_thread(db)
    await finished_on(db, 1, thread, [call()])
    await finished_on(db, 2, thread, [call()])
    hold = "UPDATE user_token_usage SET total_tokens = total_tokens WHERE shard = 1"
    async with held(database_url, hold):
        other_shard = asyncio.create_task(finished_on(db, 2, thread, [call()]))
        await until(lambda: other_shard.done() or a_lock_is_awaited(db),
                    what="the finish on shard 2 to end or wait")
        assert other_shard.done(), "a finish on shard 2 waited for shard 1's row"
        await other_shard
        same_shard = asyncio.create_task(finished_on(db, 1, thread, [call()]))
        await until_a_lock_is_awaited(db)
        assert not same_shard.done()
    await same_shard
    async with db.transaction(read_only=True) as s:
        counts = sorted((row.shard, row.message_count)
                        for row in (await s.execute(select(UserTokenUsage))).scalars())
    assert counts == [(1, 2), (2, 2)]


async def test_a_process_finishes_take_the_shards_in_turn(db: Database) -> None:
    """One turn repository (a process's), one user, seventeen finishes: sixteen rows, the
    first shard taken twice, and one rollup."""
    rows = turn_rows(db, RollupShards(14))
    thread = await new_thread(db)
    for _ in range(17):
        opened = await open_rows(db, thread, "q")
        await rows.finish(FinishedMessage(opened.assistant.id, "a", {}, "complete", [call()]))
    day = utc_day(utcnow())
    async with db.transaction(read_only=True) as s:
        shards = {row.shard: row.message_count
                  for row in (await s.execute(select(UserTokenUsage))).scalars()}
        [figures] = (await usage_reports.stored_rollups(s, day, day)).values()
    assert shards == {shard: 2 if shard == 14 else 1 for shard in range(16)}
    assert figures.message_count == 17
