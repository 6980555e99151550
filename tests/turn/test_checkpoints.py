"""The checkpointer writes the text of every stream that grew, in one transaction per round,
and nothing for a stream that did not change or has ended."""

from __future__ import annotations

from app.store.db import Database
from app.store.models import Message
from app.turn.checkpoints import Checkpointer
from tests.store.factories import new_thread, open_rows


async def _streaming_row(db: Database) -> Message:
    thread = await new_thread(db)
    return (await open_rows(db, thread, None)).assistant


async def _content(db: Database, row: Message) -> str:
    async with db.transaction() as s:
        found = await s.get(Message, row.id)
    assert found is not None
    return found.content


async def test_changed_streams_are_written_together_and_ended_ones_never(db: Database) -> None:
    first, second = await _streaming_row(db), await _streaming_row(db)
    texts = {first.id: "Hel", second.id: ""}
    checkpoints = Checkpointer(db, interval_s=1.0)
    for row in (first, second):
        checkpoints.track(row.id, lambda mid=row.id: texts[mid])  # type: ignore[misc]
    assert await checkpoints.write_once() == 1  # the empty stream has nothing new
    assert await checkpoints.write_once() == 0  # unchanged: no transaction at all
    texts[first.id], texts[second.id] = "Hello", "Hi"
    assert await checkpoints.write_once() == 2
    assert (await _content(db, first), await _content(db, second)) == ("Hello", "Hi")
    checkpoints.untrack(first.id)
    texts[first.id] = "Hello, world"
    assert await checkpoints.write_once() == 0
    assert await _content(db, first) == "Hello" and checkpoints.tracked == 1
