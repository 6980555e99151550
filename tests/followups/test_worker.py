"""The worker in-process, on both backends: what a shutdown (a deploy) does to the follow-ups
it holds (one that has not started goes back to the queue; one whose prompt is stored is
settled failed, never run twice), and due times and leases read on the worker's own clock."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import AsyncIterator

import pytest
from sqlalchemy import select, update

from app.config.settings import Settings
from app.core.clock import utcnow
from app.followups import queue_repository as followup_queue
from app.followups.queue_repository import Claim
from app.followups.repository import schedule_followup
from app.followups.worker import FollowupWorker
from app.gateway.runtime import Runtime
from app.store.models import Followup, Message, Thread
from app.threads.repository import set_autonomy
from tests.followups.helpers import HandClock
from tests.store.factories import new_thread
from tests.support.gateway import DemoLlm
from tests.support.runtimes import runtime_of


@pytest.fixture
async def quick_runtime(database_url: str, demo_llm: DemoLlm) -> AsyncIterator[Runtime]:
    """On the fast demo model: for tests that let every follow-up run to its end."""
    async with runtime_of(Settings(database_url=database_url, upstream_base_url=demo_llm.base_url,
                                   upstream_max_retries=0, title_calls=False)) as rt:
        yield rt


async def claimed(rt: Runtime, worker: FollowupWorker) -> tuple[Thread, Claim]:
    thread = await new_thread(rt.db)
    async with rt.db.transaction() as s:
        await set_autonomy(s, thread.user_id, thread.id, {"enabled": True, "idle_seconds": 60})
        await schedule_followup(s, thread_id=thread.id, user_id=thread.user_id,
                                trigger_type="check_in", reason="idle",
                                due_at=utcnow() - dt.timedelta(seconds=1))
    async with rt.db.transaction() as s:
        [claim] = await followup_queue.claim_due(
            s, worker_id=worker.worker_id, now=utcnow(), lease=worker.lease,
            max_attempts=worker.max_attempts, limit=1)
    return thread, claim


async def state(rt: Runtime, thread: Thread) -> tuple[tuple[str, str | None], list[str]]:
    """The claimed follow-up's state (a completed reply schedules the next one after it) and
    the thread's messages."""
    async with rt.db.transaction() as s:
        followup = (await s.execute(
            select(Followup).order_by(Followup.created_at).limit(1))).scalar_one()
        rows = (await s.execute(select(Message).where(Message.thread_id == thread.id)
                                .order_by(Message.created_at))).scalars().all()
    return (followup.status, followup.claimed_by), [f"{m.role}:{m.status}" for m in rows]


async def cancel(task: asyncio.Task[None]) -> None:
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_shutdown_before_the_turn_starts_gives_the_followup_back(
    quick_runtime: Runtime,
) -> None:
    runtime = quick_runtime
    worker = FollowupWorker(runtime.turn_deps)
    thread, claim = await claimed(runtime, worker)
    slots = runtime.turn_deps.slots
    assert slots is not None and slots.timeout_s > 0
    taken = [await slots.acquire() for _ in range(slots.free)]
    task = asyncio.create_task(worker._run_claim(claim))
    await asyncio.sleep(0)  # started, opening the turn: waiting for an upstream slot
    await cancel(task)
    for slot in taken:
        slot.release()
    assert await state(runtime, thread) == (("pending", None), [])
    # ... and the next process takes it and runs it to the end.
    successor = FollowupWorker(runtime.turn_deps)
    async with runtime.db.transaction() as s:
        [again] = await followup_queue.claim_due(
            s, worker_id=successor.worker_id, now=utcnow(), lease=successor.lease,
            max_attempts=successor.max_attempts, limit=1)
    await successor._run_claim(again)
    followup, rows = await state(runtime, thread)
    assert followup[0] == "done" and rows == ["user:complete", "assistant:complete"]


async def test_shutdown_mid_turn_settles_it_failed_never_to_run_again(runtime: Runtime) -> None:
    """The reply is stored `interrupted`, saying the shutdown stopped it."""
    worker = FollowupWorker(runtime.turn_deps)
    thread, claim = await claimed(runtime, worker)
    task = asyncio.create_task(worker._run_claim(claim))
    worker._running.add(task)  # as poll_once starts it
    for _ in range(200):  # until the synthetic prompt is stored and the reply streams
        await asyncio.sleep(0.02)
        if len((await state(runtime, thread))[1]) == 2:
            break
    await worker._cancel_running()  # what the worker's end (the process's shutdown) runs
    followup, rows = await state(runtime, thread)
    assert followup[0] == "failed"
    assert rows == ["user:complete", "assistant:interrupted"]
    async with runtime.db.transaction() as s:
        reply = (await s.execute(select(Message).where(
            Message.thread_id == thread.id, Message.role == "assistant"))).scalar_one()
    assert reply.meta["interrupted_reason"] == "shutting_down"


async def test_due_times_and_leases_are_read_on_the_workers_clock(
    quick_runtime: Runtime,
) -> None:
    """Nothing is due by the real clock; a minute and a lease later by the worker's clock, the
    due follow-up runs and the one whose claim ran out of attempts fails, in the same poll."""
    runtime = quick_runtime
    clock = HandClock()
    worker = FollowupWorker(runtime.turn_deps, clock=clock)
    stuck, _ = await claimed(runtime, FollowupWorker(runtime.turn_deps, worker_id="dead"))
    due_later = await new_thread(runtime.db)
    async with runtime.db.transaction() as s:
        await s.execute(update(Followup).values(attempts=worker.max_attempts))  # none left
        await set_autonomy(s, due_later.user_id, due_later.id,
                           {"enabled": True, "idle_seconds": 60})
        await schedule_followup(s, thread_id=due_later.id, user_id=due_later.user_id,
                                trigger_type="check_in", reason="idle",
                                due_at=utcnow() + dt.timedelta(seconds=60))

    assert await worker.poll_once() == 0
    assert [f.status for f in await followups(runtime)] == ["claimed", "pending"]

    clock.advance(worker.lease.total_seconds() + 1)
    before = utcnow()
    assert await worker.poll_once() == 1
    await asyncio.gather(*list(worker._running))
    # the reply that ran schedules the thread's next follow-up after these two
    exhausted, ran = (await followups(runtime))[:2]
    assert (exhausted.thread_id, exhausted.status) == (stuck.id, "failed")
    assert (ran.thread_id, ran.status, ran.claimed_by) == (due_later.id, "done", worker.worker_id)
    # settled and claimed at the worker's time, not the real one
    assert exhausted.finished_at is not None and ran.claimed_at is not None
    assert exhausted.finished_at - before >= worker.lease
    assert ran.claimed_at - before >= worker.lease


async def followups(rt: Runtime) -> list[Followup]:
    """Every follow-up, oldest due first."""
    async with rt.db.transaction() as s:
        return list((await s.execute(select(Followup).order_by(Followup.due_at))).scalars())
