"""Follow-ups and the turn limits, in process on both backends: a follow-up is never refused by
its user's stream cap, and one that finds no free upstream slot goes back to the queue
unharmed (nothing stored) and runs later."""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator

import pytest

from app.config.settings import Settings
from app.core.clock import utcnow
from app.followups import queue_repository as followup_queue
from app.followups.queue_repository import Claim
from app.followups.worker import FollowupWorker
from app.gateway.runtime import Runtime
from app.keys.service import Principal
from app.turn.native.turn import admit_turn
from tests.followups.test_worker import claimed, state
from tests.store.factories import new_thread
from tests.support.gateway import DemoLlm
from tests.support.runtimes import runtime_of


@pytest.fixture
async def runtime(database_url: str, demo_llm: DemoLlm) -> AsyncIterator[Runtime]:
    async with runtime_of(Settings(
        _env_file=None, database_url=database_url,  # type: ignore[call-arg]
        upstream_base_url=demo_llm.base_url, upstream_max_retries=0, title_calls=False,
        max_streams_per_user=1, upstream_pool_size=1, upstream_slot_timeout_s=0)) as rt:
        yield rt


async def claim_again(rt: Runtime, worker: FollowupWorker, *, later_s: float) -> Claim:
    async with rt.db.transaction() as s:
        [claim] = await followup_queue.claim_due(
            s, worker_id=worker.worker_id, now=utcnow() + dt.timedelta(seconds=later_s),
            lease=worker.lease, max_attempts=worker.max_attempts, limit=1)
    return claim


async def test_no_free_upstream_slot_puts_the_followup_back_for_later(runtime: Runtime) -> None:
    worker = FollowupWorker(runtime.turn_deps)
    thread, claim = await claimed(runtime, worker)
    assert runtime.turn_deps.slots is not None
    slot = await runtime.turn_deps.slots.acquire()  # every slot taken
    await worker._run_claim(claim)
    assert await state(runtime, thread) == (("pending", None), [])
    slot.release()
    await worker._run_claim(await claim_again(runtime, worker, later_s=60))
    followup, rows = await state(runtime, thread)
    assert followup[0] == "done" and rows == ["user:complete", "assistant:complete"]


async def test_a_user_at_the_stream_cap_still_gets_the_followup(runtime: Runtime) -> None:
    worker = FollowupWorker(runtime.turn_deps)
    thread, claim = await claimed(runtime, worker)
    other = await new_thread(runtime.db, thread.user_id)
    runtime.turn_deps.slots = None  # the slot is not what this test is about
    held = await admit_turn(runtime.gate, Principal(thread.user_id, False), other.id, "hi")
    try:
        await worker._run_claim(claim)
    finally:
        await held.finish()
    followup, rows = await state(runtime, thread)
    assert followup[0] == "done" and rows == ["user:complete", "assistant:complete"]
