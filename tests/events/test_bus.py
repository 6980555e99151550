"""The message bus across processes through Redis (no NOTIFY, no LISTEN connection): every
process subscribed to the thread, the finishing one included, hears of a turn's messages once
they are committed."""

from __future__ import annotations

import asyncio

from app.answer.records import FinishedMessage
from app.events.bus import RedisMessageBus, make_message_bus
from app.store.db import Database
from app.turn.observers.announcer import MessageAnnouncer
from app.turn.observers.seam import TurnView
from app.turn.rows import turn_rows
from app.turn.run.persist import TurnStore
from tests.store.factories import call, new_thread, open_rows
from tests.support.databases import postgres_only
from tests.support.outcomes import complete_outcome
from tests.support.redis_keys import REDIS_URL


@postgres_only("SQLite serves one process: its bus delivers in process, with or without Redis")
async def test_a_finish_is_heard_by_every_process_through_redis(
    db: Database, redis_prefix: str,
) -> None:
    thread = await new_thread(db)
    exchange = await open_rows(db, thread, "hello")
    assert exchange.user is not None
    buses = [make_message_bus(db, redis_url=REDIS_URL, redis_prefix=redis_prefix)
             for _ in range(2)]
    finishing, other = buses
    view = TurnView.of(thread, exchange.user, exchange.assistant, [])
    handler = MessageAnnouncer(finishing).open(view)
    for bus in buses:
        await bus.start()
    try:
        with finishing.subscribe(thread.id) as here, other.subscribe(thread.id) as there:
            await asyncio.sleep(0.3)  # both subscriptions are in place (Redis pub/sub)
            finished = FinishedMessage(exchange.assistant.id, "hi there", {}, "complete",
                                       [call()])
            result = await TurnStore(db, turn_rows(db), thread.user_id, [handler]).store(
                finished, complete_outcome())
            await handler.after_finish(finished, complete_outcome(), stored=True)
            heard = [await asyncio.wait_for(queue.get(), 10) for queue in (here, there)]
    finally:
        for bus in buses:
            await bus.stop()
    assert result == "stored"
    assert all(isinstance(bus, RedisMessageBus) for bus in buses)
    assert [n.message_ids for n in heard] == [(exchange.user.id, exchange.assistant.id)] * 2
