"""The dead-process sweep never waits on a row lock. A process cut off from PostgreSQL
between a statement of a transaction and its COMMIT (a silent partition holds the COMMIT)
keeps that transaction open on the server, with its row locks, until the server ends the
session: a sweep that waited on one of those rows would stall, its statement timeout would
close the gateway's end, and the server, which does not look at the client while a
statement waits on a lock, would keep the waiting statement and the rows it already took
over (the dead process's answers, so their threads could take no new turn) until the
partitioned session ended. The sweep skips such a row instead and takes it on a later round.

Each sweep here runs with a server-side `lock_timeout`: a sweep that waited would fail with
it rather than wait for the test's held transaction."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import select, text

from app.core.clock import utcnow
from app.process import repository as processes
from app.store.db import Database
from app.store.models import GatewayProcess, Message, OpenCall
from app.turn.rows import SweptAnswer
from app.turn.rows.sweeps import sweep_dead_answers
from tests.store.factories import new_thread, open_rows
from tests.support.databases import postgres_only
from tests.support.locks import held

pytestmark = postgres_only("SQLite serialises write transactions; row locks are PostgreSQL's")

DEAD_AFTER = dt.timedelta(seconds=10)


async def _sweep(db: Database, now: dt.datetime) -> list[SweptAnswer]:
    """The sweep as the process registry runs it, failing at once on a lock wait."""
    async with db.transaction() as s:
        await s.execute(text("SET LOCAL lock_timeout = '100ms'"))
        swept = await sweep_dead_answers(s, processes.live_processes(now, DEAD_AFTER), now=now)
        await processes.forget_dead_processes(s, now, DEAD_AFTER)
        return swept


async def _dead_process(db: Database) -> None:
    async with db.transaction() as s:
        await processes.register_process(s, "cut-off", hostname="h", pid=1,
                                         now=utcnow() - dt.timedelta(seconds=11))


async def _processes(db: Database) -> set[str]:
    async with db.transaction() as s:
        return set((await s.execute(select(GatewayProcess.id))).scalars())


async def test_a_dead_process_mid_heartbeat_has_its_answers_swept_and_its_row_kept_for_later(
        db: Database, database_url: str) -> None:
    await _dead_process(db)
    answer = (await open_rows(db, await new_thread(db), "hi", process_id="cut-off")).assistant
    async with held(database_url, "UPDATE gateway_processes SET pid = pid WHERE id = $1",
                    "cut-off"):
        swept = await _sweep(db, utcnow())
        still_there = await _processes(db)
    async with db.transaction() as s:
        row = await s.get(Message, answer.id)
    assert [a.message_id for a in swept] == [answer.id]
    assert row is not None and row.status == "interrupted"
    assert still_there == {"cut-off"}  # held: left to a later sweep
    assert await _sweep(db, utcnow()) == []
    assert await _processes(db) == set()


async def test_an_open_call_held_by_its_dead_process_is_taken_on_a_later_sweep(
        db: Database, database_url: str) -> None:
    await _dead_process(db)
    async with db.transaction() as s:
        call = OpenCall(user_id="u", process_id="cut-off", calls=None)
        s.add(call)
        await s.flush()
        call_id = call.id
    async with held(database_url, "UPDATE open_calls SET calls = calls WHERE id = $1", call_id):
        assert await _sweep(db, utcnow()) == []
    [swept] = await _sweep(db, utcnow())
    async with db.transaction() as s:
        left = (await s.execute(select(OpenCall.id))).scalars().all()
    assert swept.user_id == "u" and swept.message_id is None
    assert left == []
