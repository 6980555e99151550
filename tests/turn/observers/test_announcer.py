"""A finished turn announced on the message bus once the transaction that stores it
committed: the finish stays one statement with no NOTIFY in it (app.store.notify says why),
and the bus then tells every process listening, this one included."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import event

from app.answer.records import FinishedMessage
from app.events.bus import make_message_bus
from app.store.db import Database
from app.turn.observers.announcer import MessageAnnouncer
from app.turn.observers.seam import TurnView
from app.turn.rows import turn_rows
from app.turn.run.persist import TurnStore
from tests.store.factories import call, new_thread, open_rows
from tests.support.outcomes import complete_outcome


@contextmanager
def statements_run(db: Database) -> Iterator[list[str]]:
    """The SQL of each statement the database's engine runs while the block runs."""
    seen: list[str] = []

    def note(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        seen.append(statement)

    event.listen(db.engine.sync_engine, "before_cursor_execute", note)
    try:
        yield seen
    finally:
        event.remove(db.engine.sync_engine, "before_cursor_execute", note)


async def test_a_finish_is_announced_once_it_is_committed(db: Database) -> None:
    thread = await new_thread(db)
    exchange = await open_rows(db, thread, "hello")
    assert exchange.user is not None
    bus = make_message_bus(db)
    view = TurnView.of(thread, exchange.user, exchange.assistant, [])
    handler = MessageAnnouncer(bus).open(view)
    finished = FinishedMessage(exchange.assistant.id, "hi there", {}, "complete", [call()])
    await bus.start()
    try:
        with bus.subscribe(thread.id) as notices:
            with statements_run(db) as storing:
                result = await TurnStore(db, turn_rows(db), thread.user_id, [handler]).store(
                    finished, complete_outcome())
            assert notices.empty()  # nothing is announced by the store itself
            with statements_run(db) as announcing:
                await handler.after_finish(finished, complete_outcome(), stored=True)
                notice = await asyncio.wait_for(notices.get(), 10)
    finally:
        await bus.stop()
    assert result == "stored"
    assert notice.message_ids == (exchange.user.id, exchange.assistant.id)
    assert not any("pg_notify" in sql for sql in storing)
    if db.backend == "postgresql":  # the NOTIFY: one statement of its own, in autocommit
        assert len(storing) == 1 and storing[0].lstrip().startswith("WITH")
        assert [sql.split()[0] for sql in announcing] == ["SELECT"]
        assert "pg_notify" in announcing[0]
    else:  # delivered in process
        assert announcing == []
