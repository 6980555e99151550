"""Several gateway processes on one database: every due follow-up fires exactly once, and a
process killed mid-follow-up leaves no duplicate (its claim is taken again after the lease).
The processes are real gateway subprocesses; the survivor of a kill runs in process, its worker's
clock moved past the dead claim's lease instead of waiting for it."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import Iterator

import pytest

from tests.e2e.helpers import keyed_client, new_thread
from tests.followups.helpers import (
    FAST_ENV,
    HandClock,
    Rows,
    pushed_messages_after_turn,
    set_autonomy,
    wait_until,
)
from tests.support.databases import require_postgres
from tests.support.gateway import (
    DemoLlm,
    StartGateway,
    StartGatewayProcess,
    StartGatewayProcesses,
    post_turn,
    start_demo_llm,
)

#: Both processes poll often, to contend for every claim. The lease is long: a run outliving
#: FAST_ENV's 2 s on a loaded machine would be claimed again by the other process as a dead
#: worker's (the killed process's test below), which is not what this test counts.
CONTENDED_ENV = {**FAST_ENV, "CHATGATE_FOLLOWUP_POLL_S": "0.05",
                 "CHATGATE_FOLLOWUP_LEASE_S": "30"}


@pytest.fixture(scope="module")
def sluggish_demo_llm() -> Iterator[DemoLlm]:
    """60 ms a delta: a follow-up reply streams for about 4 s, time to kill its process."""
    demo = start_demo_llm(delay_ms=60, slow_first_s=0.1)
    yield demo
    demo.stop()


async def test_two_processes_fire_every_due_followup_exactly_once(
    demo_llm: DemoLlm, start_gateway_processes: StartGatewayProcesses
) -> None:
    require_postgres()
    first, second = start_gateway_processes("postgresql", 2, upstream=demo_llm,
                                            env=CONTENDED_ENV)
    rows = Rows(first.database_url)
    try:
        key = await first.api_key("crowd")
        async with first.client(key) as one, second.client(key) as two:
            threads = []
            for _ in range(8):
                thread_id = await new_thread(one)
                await set_autonomy(one, thread_id, enabled=True, idle_seconds=1,
                                   max_followups=2)
                threads.append(thread_id)
            results = await asyncio.gather(*(post_turn(one if n % 2 else two, t, f"hello {n}")
                                             for n, t in enumerate(threads)))
            assert [r.one("message_end")["status"] for r in results] == ["complete"] * 8
            for thread_id in threads:
                await wait_until(lambda t=thread_id: rows.settled_followup_replies(t, 2),
                                 timeout_s=30, what="two follow-ups")
            await asyncio.sleep(1.0)  # more polls by both processes: nothing more may fire
            for thread_id in threads:
                synthetic = await rows.synthetic(thread_id)
                followups = await rows.followups(thread_id)
                assert len(synthetic) == 2, thread_id
                assert [(f.status, f.attempts) for f in followups] == [("done", 1), ("done", 1)]
                assert len(await rows.messages(thread_id)) == 6
        claims = Counter(line["followup_id"] for gateway in (first, second)
                         for line in gateway.logs() if line.get("event") == "followup_claimed")
        assert len(claims) == 16 and set(claims.values()) == {1}
    finally:
        await rows.close()


async def test_a_process_killed_mid_followup_leaves_no_duplicate(
    live_backend: str, sluggish_demo_llm: DemoLlm, demo_llm: DemoLlm,
    start_gateway: StartGateway, start_gateway_process: StartGatewayProcess,
) -> None:
    doomed = start_gateway_process(live_backend, upstream=sluggish_demo_llm, env=FAST_ENV)
    rows = Rows(doomed.database_url)
    try:
        async with await keyed_client(doomed, "phoenix") as client:
            thread_id = await new_thread(client)
            await set_autonomy(client, thread_id, enabled=True, idle_seconds=1, max_followups=1)
            result = await post_turn(client, thread_id, "[empty] short please")
            assert result.one("message_end")["status"] == "complete"

        async def streaming_followup() -> bool:
            stored = await rows.messages(thread_id)
            return any(m.synthetic for m in stored) and stored[-1].status == "streaming"

        await wait_until(streaming_followup, what="the follow-up to be streaming")
        doomed.kill9()  # between claim and completion
        [claimed] = await rows.followups(thread_id)
        assert (claimed.status, claimed.attempts) == ("claimed", 1)

        survivor = start_gateway(live_backend, upstream=demo_llm, env=FAST_ENV,
                                 database_url=doomed.database_url)
        clock = HandClock()
        survivor.worker.clock = clock
        clock.advance(float(FAST_ENV["CHATGATE_FOLLOWUP_LEASE_S"]))  # the dead claim's lease

        async def settled() -> bool:
            [followup] = await rows.followups(thread_id)
            return followup.status == "failed"

        await wait_until(settled, what="the dead process's follow-up to be settled")
        await clock.polls(3)  # it is never claimed again
        stored = await rows.messages(thread_id)
        [followup] = await rows.followups(thread_id)
        assert [m.role for m in stored] == ["user", "assistant", "user", "assistant"]
        assert sum(m.synthetic for m in stored) == 1  # never run twice
        assert stored[-1].status == "interrupted"  # not stuck `streaming`
        assert stored[-1].meta["interrupted_reason"] == "followup_worker_died"
        assert followup.attempts == 2 and followup.claimed_by != claimed.claimed_by
        assert any(line.get("event") == "followup_already_started"
                   and line.get("followup_id") == str(followup.id)
                   for line in survivor.logs())
        assert uuid.UUID(thread_id) == followup.thread_id
    finally:
        await rows.close()
    # before the doomed process's pool drops the database they share: a clean stop
    survivor.stop()


async def test_events_reach_a_client_of_another_process(
    demo_llm: DemoLlm, start_gateway_processes: StartGatewayProcesses
) -> None:
    """PostgreSQL LISTEN/NOTIFY: the client watches process B, the user writes through
    process A, and the follow-up runs wherever it is claimed; B's client gets all of it."""
    require_postgres()
    writer, watcher = start_gateway_processes("postgresql", 2, upstream=demo_llm,
                                              env=FAST_ENV)
    key = await writer.api_key("far")
    async with writer.client(key) as a, watcher.client(key) as b:
        thread_id = await new_thread(a)
        await set_autonomy(a, thread_id, enabled=True, idle_seconds=1, max_followups=1)
        received = await pushed_messages_after_turn(b, a, thread_id, "[awaiting:task] deploy it",
                                                    timeout_s=20)
    assert [m["role"] for m in received] == ["user", "assistant", "assistant"]
    assert received[0]["content"] == "[awaiting:task] deploy it"
