"""Gateway processes, heartbeats, stream checkpoints and the sweep of a dead process's rows,
on both backends."""

from __future__ import annotations

import datetime as dt

import pytest
from sqlalchemy.ext.asyncio import AsyncSession

from app.answer.records import FinishedMessage
from app.core.clock import utcnow
from app.process import repository as processes
from app.store.db import Database
from app.store.errors import MessageAlreadyFinished
from app.store.models import GatewayProcess, Message
from app.turn.rows import SweptAnswer, turn_rows
from app.turn.rows import messages as messages_store
from app.turn.rows.sweeps import sweep_dead_answers
from tests.store.factories import new_thread, open_rows

DEAD_AFTER = dt.timedelta(seconds=10)


async def _register(db: Database, process_id: str, at: dt.datetime) -> None:
    async with db.transaction() as s:
        await processes.register_process(s, process_id, hostname="h", pid=1, now=at)


async def _sweep(s: AsyncSession, now: dt.datetime,
                 dead_after: dt.timedelta = DEAD_AFTER) -> list[SweptAnswer]:
    """The sweep as the process registry runs it: the dead processes' turns (the turn
    repository's), then their rows."""
    swept = await sweep_dead_answers(s, processes.live_processes(now, dead_after), now=now)
    await processes.forget_dead_processes(s, now, dead_after)
    return swept


async def _open(db: Database, process_id: str | None) -> Message:
    thread = await new_thread(db)
    return (await open_rows(db, thread, None, process_id=process_id)).assistant


async def test_rows_of_a_process_whose_heartbeat_stopped_are_swept(db: Database) -> None:
    now = utcnow()
    await _register(db, "alive", now)
    await _register(db, "dead", now - dt.timedelta(seconds=11))
    alive, dead = await _open(db, "alive"), await _open(db, "dead")
    gone, legacy = await _open(db, "never-registered"), await _open(db, None)
    async with db.transaction() as s:
        await messages_store.checkpoint_contents(s, {dead.id: "seen so far"}, now=now)
        assert len(await _sweep(s, now)) == 2
    async with db.transaction() as s:
        rows = {m.id: m for m in [await s.get(Message, r.id)
                                  for r in (alive, dead, gone, legacy)] if m}
        left = {p.id for p in (await s.execute(
            GatewayProcess.__table__.select())).all()}  # type: ignore[attr-defined]
    assert rows[dead.id].status == rows[gone.id].status == "interrupted"
    assert rows[dead.id].meta["interrupted_reason"] == "process_died"
    assert rows[dead.id].content == "seen so far"
    # the live process's row and a row without a process (the age sweep's) are untouched
    assert rows[alive.id].status == rows[legacy.id].status == "streaming"
    assert left == {"alive"}


async def test_a_beat_keeps_a_process_alive_and_re_registers_a_swept_one(db: Database) -> None:
    old = utcnow() - dt.timedelta(seconds=30)
    await _register(db, "slow", old)
    row = await _open(db, "slow")
    async with db.transaction() as s:
        await processes.beat(s, "slow", hostname="h", pid=1, now=utcnow())
        assert await _sweep(s, utcnow()) == []
        await processes.unregister_process(s, "slow")
        await processes.beat(s, "slow", hostname="h", pid=1, now=utcnow())
        assert await s.get(GatewayProcess, "slow") is not None
        assert (await s.get(Message, row.id)).status == "streaming"  # type: ignore[union-attr]


async def test_a_checkpoint_never_overwrites_a_finished_row(db: Database) -> None:
    running, finished = await _open(db, None), await _open(db, None)
    await turn_rows(db).finish(FinishedMessage(finished.id, "the whole answer", {}, "complete"))
    async with db.transaction() as s:
        await messages_store.checkpoint_contents(
            s, {running.id: "partial", finished.id: "part"}, now=utcnow())
    async with db.transaction() as s:
        first, second = await s.get(Message, running.id), await s.get(Message, finished.id)
    assert first is not None and (first.content, first.status) == ("partial", "streaming")
    assert second is not None and second.content == "the whole answer"


async def test_a_process_within_its_lease_is_not_swept_whatever_the_sweepers_dead_after(
        db: Database) -> None:
    """The lease is the owner's word: until `lease_until` it may still be ending its
    answers, so a sweeper with a shorter dead-after takes nothing over before then."""
    now = utcnow()
    async with db.transaction() as s:
        await processes.register_process(s, "leased", hostname="h", pid=1,
                                         now=now - dt.timedelta(seconds=30),
                                         lease_until=now + dt.timedelta(seconds=1))
    row = await _open(db, "leased")
    async with db.transaction() as s:
        assert await _sweep(s, now) == []
    async with db.transaction() as s:
        later = now + dt.timedelta(seconds=2)
        swept = await _sweep(s, later)
    assert [answer.message_id for answer in swept] == [row.id]


async def test_a_late_beat_moves_neither_the_heartbeat_nor_the_lease_back(db: Database) -> None:
    now = utcnow()
    await _register(db, "p", now)
    async with db.transaction() as s:
        assert await processes.beat(s, "p", hostname="h", pid=1, now=now,
                                    lease_until=now + dt.timedelta(seconds=6))
        assert await processes.beat(s, "p", hostname="h", pid=1,
                                    now=now - dt.timedelta(seconds=5),
                                    lease_until=now + dt.timedelta(seconds=1))
    async with db.transaction() as s:
        process = await s.get(GatewayProcess, "p")
    assert process is not None
    assert process.heartbeat_at == now
    assert process.lease_until == now + dt.timedelta(seconds=6)


async def test_a_late_finish_does_not_overwrite_a_row_the_sweep_took_over(
        db: Database) -> None:
    """The fence in the finish: a process whose answer was swept (it looked dead) and that
    finishes it later, once it reaches the database again, stores nothing; the sweep's
    row, and the usage it billed, stand."""
    await _register(db, "cut-off", utcnow() - dt.timedelta(seconds=11))
    row = await _open(db, "cut-off")
    async with db.transaction() as s:
        await messages_store.checkpoint_contents(s, {row.id: "seen so far"}, now=utcnow())
        await _sweep(s, utcnow())
    with pytest.raises(MessageAlreadyFinished):
        await turn_rows(db).finish(FinishedMessage(row.id, "seen so far and more", {},
                                                   "complete"))
    async with db.transaction() as s:
        stored = await s.get(Message, row.id)
    assert stored is not None and stored.status == "interrupted"
    assert stored.content == "seen so far"
    assert stored.meta["interrupted_reason"] == "process_died"
