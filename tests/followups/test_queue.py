"""The follow-up queue on real SQLite and PostgreSQL: claims, leases, conditional settling,
the re-checks made before a follow-up runs, and the consecutive count behind the cap."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt

import pytest
from sqlalchemy import select

from app.core.clock import utcnow
from app.followups import queue_repository as queue
from app.store.db import Database
from app.store.models import Followup, Message, Thread
from app.threads import repository as threads_store
from tests.store.factories import finish, legacy_prompt, new_thread, open_rows, turn

LEASE = dt.timedelta(seconds=30)


async def schedule(db: Database, thread: Thread, due_in_s: float = -1.0) -> Followup:
    async with db.transaction() as s:
        return await queue.schedule_one(
            s, thread_id=thread.id, user_id=thread.user_id, trigger_type="check_in",
            reason="No activity for 1 second; checking in",
            due_at=utcnow() + dt.timedelta(seconds=due_in_s))


async def user_message(db: Database, thread: Thread, content: str, *,
                       synthetic: bool = False) -> Message:
    """A user message of the thread's, synthetic (a follow-up's prompt) or real, stored as
    the gateway stores one: with its answer, finished `failed` here so that the thread is
    free for the next message."""
    opened = await open_rows(db, thread, content, synthetic=synthetic,
                             trigger_type="check_in" if synthetic else None,
                             trigger_reason="r" if synthetic else None)
    await finish(db, opened.assistant.id, "", status="failed", calls=[])
    assert opened.user is not None
    return opened.user


async def claim(db: Database, worker: str, *, now: dt.datetime | None = None,
                max_attempts: int = 3, limit: int = 10) -> list[queue.Claim]:
    async with db.transaction() as s:
        return await queue.claim_due(s, worker_id=worker, now=now or utcnow(), lease=LEASE,
                                     max_attempts=max_attempts, limit=limit)


async def status_of(db: Database, followup_id: object) -> tuple[str, int]:
    async with db.transaction() as s:
        row = await queue.get_followup(s, followup_id)  # type: ignore[arg-type]
        assert row is not None
        return row.status, row.attempts


async def test_only_due_followups_are_claimed_once(db: Database) -> None:
    thread = await new_thread(db)
    other = await new_thread(db)
    due = await schedule(db, thread)
    await schedule(db, other, due_in_s=60)
    claims = await claim(db, "w1")
    assert [c.id for c in claims] == [due.id]
    assert claims[0].attempts == 1 and claims[0].claimed_by == "w1"
    assert await claim(db, "w2") == []
    assert await status_of(db, due.id) == ("claimed", 1)


async def test_schedule_one_keeps_a_single_pending_followup(db: Database) -> None:
    thread = await new_thread(db)
    first = await schedule(db, thread, 60)
    second = await schedule(db, thread, 60)
    assert (await status_of(db, first.id))[0] == "cancelled"
    assert (await status_of(db, second.id))[0] == "pending"


async def test_a_real_user_message_cancels_pending_but_a_synthetic_one_does_not(
    db: Database,
) -> None:
    thread = await new_thread(db)
    pending = await schedule(db, thread, 60)
    await user_message(db, thread, "prompt", synthetic=True)
    assert (await status_of(db, pending.id))[0] == "pending"
    await user_message(db, thread, "I'm back")
    assert (await status_of(db, pending.id))[0] == "cancelled"


async def test_concurrent_claimers_never_share_a_followup(db: Database) -> None:
    threads = [await new_thread(db) for _ in range(12)]
    ids = {(await schedule(db, t)).id for t in threads}
    results = await asyncio.gather(*(claim(db, f"w{i}", limit=3) for i in range(6)))
    claimed = [c.id for batch in results for c in batch]
    assert len(claimed) == len(set(claimed))
    assert set(claimed) <= ids
    leftover = await claim(db, "late", limit=50)
    assert set(claimed) | {c.id for c in leftover} == ids


async def test_expired_lease_is_reclaimed_and_the_stale_claim_cannot_settle(
    db: Database,
) -> None:
    thread = await new_thread(db)
    followup = await schedule(db, thread)
    [first] = await claim(db, "dead")
    assert await claim(db, "w2") == []  # lease still running
    later = utcnow() + LEASE + dt.timedelta(seconds=1)
    [second] = await claim(db, "w2", now=later)
    assert second.id == followup.id and second.attempts == 2
    async with db.transaction() as s:
        assert not await queue.finish_claim(s, first, "done", utcnow())
        assert not await queue.renew_lease(s, first, later + LEASE)
    async with db.transaction() as s:
        assert await queue.finish_claim(s, second, "done", utcnow())
    assert await status_of(db, followup.id) == ("done", 2)


async def test_exhausted_followup_is_failed_not_reclaimed(db: Database) -> None:
    thread = await new_thread(db)
    followup = await schedule(db, thread)
    now = utcnow()
    for attempt in range(1, 3):
        [c] = await claim(db, f"w{attempt}", now=now, max_attempts=2)
        assert c.attempts == attempt
        now += LEASE + dt.timedelta(seconds=1)
    assert await claim(db, "w3", now=now, max_attempts=2) == []
    async with db.transaction() as s:
        assert await queue.fail_exhausted(s, now=now, max_attempts=2) == 1
    assert await status_of(db, followup.id) == ("failed", 2)


async def test_release_for_retry_makes_it_pending_again(db: Database) -> None:
    thread = await new_thread(db)
    followup = await schedule(db, thread)
    [c] = await claim(db, "w1")
    async with db.transaction() as s:
        assert await queue.release_for_retry(s, c, utcnow() - dt.timedelta(seconds=1))
    [again] = await claim(db, "w2")
    assert again.id == followup.id and again.attempts == 2


async def test_blocker_sees_a_reply_a_started_turn_and_a_lost_claim(db: Database) -> None:
    thread = await new_thread(db)
    await turn(db, thread, "question", "answer")
    await schedule(db, thread)
    [c] = await claim(db, "w1")
    async with db.transaction() as s:
        assert await queue.blocker(s, c) is None
    await user_message(db, thread, "prompt", synthetic=True)
    async with db.transaction() as s:
        assert await queue.blocker(s, c) == "already_started"
    await user_message(db, thread, "a real reply")
    async with db.transaction() as s:
        assert await queue.blocker(s, c) == "user_replied"
    await schedule(db, thread)
    [other] = await claim(db, "w2")
    async with db.transaction() as s:
        await queue.finish_claim(s, other, "failed", utcnow())  # settled elsewhere meanwhile
        assert await queue.blocker(s, other) == "lost_claim"


async def test_a_reply_stands_a_claimed_followup_down_whatever_the_clocks(db: Database) -> None:
    """The scheduling process's clock ran an hour ahead: no message looks newer than the
    follow-up, yet the reply cancelled the claim itself, so the worker stands down."""
    thread = await new_thread(db)
    await turn(db, thread, "question", "answer")
    await schedule(db, thread)
    [c] = await claim(db, "w1")
    skewed = dataclasses.replace(c, created_at=c.created_at + dt.timedelta(hours=1))
    await user_message(db, thread, "a real reply")
    async with db.transaction() as s:
        assert await queue.blocker(s, skewed) == "user_replied"
    assert await status_of(db, c.id) == ("cancelled", 1)


async def test_consecutive_followups_restart_at_each_real_message(db: Database) -> None:
    thread = await new_thread(db)

    async def synthetic() -> None:
        await user_message(db, thread, "p", synthetic=True)

    async def count() -> int:
        async with db.transaction() as s:
            return await queue.consecutive_followups(s, thread.id)

    await synthetic()
    assert await count() == 1  # no real message yet: all of them count
    await turn(db, thread, "hello", "hi")
    assert await count() == 0
    await synthetic()
    await synthetic()
    assert await count() == 2
    await legacy_prompt(db, thread, "[AUTONOMOUS_FOLLOWUP: legacy]")
    assert await count() == 3  # a legacy follow-up prompt is not the user either


async def started_followup_turn(db: Database) -> tuple[Thread, Message, dt.datetime]:
    """A synthetic prompt and its reply left `streaming`: (thread, reply, time before both)."""
    thread = await new_thread(db)
    since = utcnow()
    opened = await open_rows(db, thread, "p", synthetic=True, trigger_type="check_in",
                             trigger_reason="r")
    return thread, opened.assistant, since


async def test_orphaned_streaming_reply_is_interrupted(db: Database) -> None:
    thread, reply, since = await started_followup_turn(db)
    async with db.transaction() as s:
        assert await queue.interrupt_orphaned_replies(s, thread.id, since, utcnow()) == 1
    async with db.transaction() as s:
        row = await threads_store.get_message(s, thread.user_id, reply.id)
    assert row is not None and row.status == "interrupted"
    assert row.meta["interrupted_reason"] == "followup_worker_died"


@pytest.mark.parametrize("backend", [pytest.param("postgresql", marks=pytest.mark.postgres)])
async def test_a_reply_being_finished_is_not_taken_for_an_orphan(db: Database) -> None:
    """A worker that lost its lease but is finishing its reply holds the row's lock: the
    worker re-running the follow-up must leave that row to it (PostgreSQL row locks;
    SQLite has one writer at a time, so the two cannot overlap there)."""
    thread, reply, since = await started_followup_turn(db)
    async with db.transaction() as finishing:
        await finishing.execute(select(Message).where(Message.id == reply.id).with_for_update())
        async with db.transaction() as s:
            assert await queue.interrupt_orphaned_replies(s, thread.id, since, utcnow()) == 0
    async with db.transaction() as s:
        row = await threads_store.get_message(s, thread.user_id, reply.id)
    assert row is not None and row.status == "streaming"
