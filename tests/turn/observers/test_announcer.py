"""A finished turn announced on the message bus, from the transaction that stores it."""

from __future__ import annotations

import asyncio

from app.answer.records import FinishedMessage
from app.events.bus import make_message_bus
from app.store.db import Database
from app.turn.observers.announcer import MessageAnnouncer
from app.turn.observers.seam import TurnView
from app.turn.rows import turn_rows
from app.turn.run.persist import TurnStore
from tests.store.factories import call, new_thread, open_rows
from tests.support.outcomes import complete_outcome
from tests.support.statements import recorded_statements


async def test_a_finish_announces_its_messages_from_its_one_statement(db: Database) -> None:
    """On PostgreSQL the NOTIFY is sent by the store's one statement (no round trip of its
    own while the finish holds its rows' locks), and every process listening hears of the
    turn's two messages once it commits."""
    thread = await new_thread(db)
    exchange = await open_rows(db, thread, "hello")
    assert exchange.user is not None
    bus = make_message_bus(db)
    view = TurnView(
        user_id=thread.user_id, thread_id=thread.id, message_id=exchange.assistant.id,
        user_message_id=exchange.user.id, user_text="hello",
        user_message_at=exchange.user.created_at, synthetic=False, hidden=False,
        thread_title=None, thread_summary=None, history=())
    store = TurnStore(db, turn_rows(db), thread.user_id, [MessageAnnouncer(bus).open(view)])
    await bus.start()
    try:
        with bus.subscribe(thread.id) as notices:
            with recorded_statements(db) as statements:
                result = await store.store(FinishedMessage(
                    exchange.assistant.id, "hi there", {}, "complete", [call()]),
                    complete_outcome())
            assert result == "stored"
            if db.backend == "postgresql":
                assert [kind for kind, _ in statements if kind != "BEGIN"] == ["WITH"]
                notice = await asyncio.wait_for(notices.get(), 10)
                assert notice.message_ids == (exchange.user.id, exchange.assistant.id)
            else:  # delivered in process after commit (after_finish), nothing in the store
                assert "SAVEPOINT" not in [kind for kind, _ in statements] and notices.empty()
    finally:
        await bus.stop()
