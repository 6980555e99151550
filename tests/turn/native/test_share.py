"""The Redis side of turn logs on a real Redis (a key prefix of this test's own): a mirrored
log is read from any position by another process's follower, live; readers' presence and
stop requests reach the owner; a follower whose owner died ends instead of waiting."""

from __future__ import annotations

import asyncio
import uuid

from app.answer.events import Delta, Ended, Started, TurnEvent
from app.turn.native.event_log import TurnLog
from app.turn.native.share import SharedTurns
from tests.support.redis_keys import REDIS_URL

THREAD, USER_MESSAGE = uuid.uuid4(), uuid.uuid4()


def shared(prefix: str) -> SharedTurns:
    """Silences of 50 ms instead of 1 s: a follower's checks come 20 times sooner."""
    return SharedTurns(REDIS_URL, prefix=prefix, keep_s=60, max_events=1000,
                       follow_block_ms=50)


async def still_streaming() -> bool:
    return True


async def follow(turns: SharedTurns, message_id: uuid.UUID, start: int) -> list[TurnEvent]:
    return [e async for e in turns.follow(message_id, start, still_streaming)]


async def test_another_process_follows_the_mirrored_log_live_from_any_position(
    redis_prefix: str
) -> None:
    owner, other = shared(redis_prefix), shared(redis_prefix)
    message_id, log = uuid.uuid4(), TurnLog()
    log.append(Started(THREAD, USER_MESSAGE, message_id))
    for seq in range(1, 4):
        log.append(Delta(f"d{seq}", seq))
    mirror = asyncio.create_task(owner.mirror(message_id, log))
    reader = asyncio.create_task(follow(other, message_id, 2))  # after delta 1
    for seq in range(4, 7):
        log.append(Delta(f"d{seq}", seq))
        await asyncio.sleep(0.01)
    log.append(Ended(message_id, "complete"))
    log.close()
    await asyncio.wait_for(mirror, 5)
    events = await asyncio.wait_for(reader, 5)
    assert events == [*(Delta(f"d{seq}", seq) for seq in range(2, 7)),
                      Ended(message_id, "complete")]
    assert await other.span(message_id) == (0, 7)
    assert await owner.read_elsewhere(message_id)  # the follower said it was reading
    await owner.aclose()
    await other.aclose()


async def test_a_stop_request_reaches_the_listening_owner(redis_prefix: str) -> None:
    owner, other = shared(redis_prefix), shared(redis_prefix)
    stopped: asyncio.Queue[tuple[uuid.UUID, str]] = asyncio.Queue()
    listener = asyncio.create_task(owner.listen_for_stops(
        lambda message_id, reason: stopped.put_nowait((message_id, reason))))
    message_id = uuid.uuid4()
    try:
        for _ in range(50):  # until the owner's subscription is live
            await other.request_stop(message_id)
            try:
                assert await asyncio.wait_for(stopped.get(), 0.1) == (message_id, "stop_request")
                break
            except TimeoutError:
                continue
        else:
            raise AssertionError("the stop request never reached the owner")
        # any other reason travels with it (a revoked key seen by a reader elsewhere)
        revoked = uuid.uuid4()
        await other.request_stop(revoked, "key_revoked")
        while (got := await asyncio.wait_for(stopped.get(), 5))[0] != revoked:
            assert got == (message_id, "stop_request")  # a late echo of the loop's requests
        assert got == (revoked, "key_revoked")
    finally:
        listener.cancel()
        await asyncio.gather(listener, return_exceptions=True)
        await owner.aclose()
        await other.aclose()


async def test_a_follower_ends_when_the_log_is_gone(redis_prefix: str) -> None:
    """Its owner died and the log expired: the follower returns (its caller then sends the
    stored message) instead of waiting for events that will never come."""
    turns = shared(redis_prefix)
    message_id, log = uuid.uuid4(), TurnLog()
    log.append(Started(THREAD, USER_MESSAGE, message_id))
    log.close()
    await turns.mirror(message_id, log)
    await turns.client.delete(turns.log_key(message_id))
    events = await asyncio.wait_for(follow(turns, message_id, 1), 5)
    assert events == []
    await turns.aclose()
