"""Resuming an answer another process streams, from its copy in Redis: the copy may be behind
what the owner's client read (a batch still on its way, the owner's first write after a
Redis outage meeting a dead pooled connection), so a client that comes back on another
process at once must be served from its next event when it arrives, not refused."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest

from app.answer.events import Delta, Ended, Started
from app.store.db import Database
from app.turn.native.event_log import TurnLog
from app.turn.native.resume import ResumeEvent, ResumeRefused, TurnResumes
from app.turn.native.runs import TurnRuns
from app.turn.native.share import SharedTurns
from tests.store.factories import finish, new_thread, open_rows
from tests.support.redis_keys import REDIS_URL
from tests.support.waits import until

#: The test's bound on reading a resumed stream to its end.
READ_WITHIN_S = 30.0


def shared(prefix: str) -> SharedTurns:
    return SharedTurns(REDIS_URL, prefix=prefix, keep_s=60, max_events=1000,
                       follow_block_ms=50)


async def test_a_resume_past_the_copy_of_a_streaming_answer_waits_for_it(
    db: Database, redis_prefix: str
) -> None:
    thread = await new_thread(db)
    opened = await open_rows(db, thread, "q")
    message_id = opened.assistant.id
    owner, here = shared(redis_prefix), shared(redis_prefix)
    log = TurnLog()
    log.append(Started(thread.id, uuid.uuid4(), message_id))
    log.append(Delta("a", 1))
    mirror = asyncio.create_task(owner.mirror(message_id, log))
    try:
        async def copied() -> bool:
            return await here.span(message_id) == (0, 1)

        await until(copied, what="the copy to hold positions 0 and 1")
        resumes = TurnResumes(db, TurnRuns(grace_s=1, keep_s=60, max_events=1000, shared=here))
        # the owner's client read up to position 3 before it left
        stream = await resumes.resume(thread.user_id, thread.id, message_id, last_event_id=3)
        reading = asyncio.create_task(_read(stream.events()))
        for seq in range(2, 6):
            log.append(Delta("bcde"[seq - 2], seq))
        log.append(Ended(message_id, "complete"))
        log.close()
        events = await asyncio.wait_for(reading, READ_WITHIN_S)
        await stream.close()
    finally:
        await asyncio.wait_for(mirror, READ_WITHIN_S)
        await owner.aclose()
        await here.aclose()
    assert events == [Delta("d", 4), Delta("e", 5), Ended(message_id, "complete")]


async def test_a_resume_past_the_end_of_a_finished_answer_is_refused(
    db: Database, redis_prefix: str
) -> None:
    """Over, the copy's end is the answer's: an id past it is a client's mistake (409)."""
    thread = await new_thread(db)
    message_id = (await open_rows(db, thread, "q")).assistant.id
    await finish(db, message_id, "over")
    owner, here = shared(redis_prefix), shared(redis_prefix)
    log = TurnLog()
    log.append(Started(thread.id, uuid.uuid4(), message_id))
    log.append(Ended(message_id, "complete"))
    log.close()
    try:
        await asyncio.wait_for(owner.mirror(message_id, log), READ_WITHIN_S)
        resumes = TurnResumes(db, TurnRuns(grace_s=1, keep_s=60, max_events=1000, shared=here))
        with pytest.raises(ResumeRefused) as refused:
            await resumes.resume(thread.user_id, thread.id, message_id, last_event_id=5)
        assert (refused.value.status, refused.value.code) == (409, "last_event_id_ahead")
    finally:
        await owner.aclose()
        await here.aclose()


async def _read(events: AsyncIterator[ResumeEvent]) -> list[ResumeEvent]:
    return [event async for event in events]
