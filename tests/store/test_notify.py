"""PostgreSQL's NOTIFY as the events bus sends it: one statement of its own, in autocommit,
heard by a listener on another connection; a payload PostgreSQL would refuse is refused
before it is sent."""

from __future__ import annotations

import asyncio

import pytest

from app.store.db import Database
from app.store.notify import MAX_PAYLOAD_BYTES, Notification, open_listener, send
from tests.support.databases import postgres_only


@postgres_only("SQLite has no NOTIFY: its bus delivers in process")
async def test_a_notice_sent_alone_is_heard_by_a_listener(db: Database) -> None:
    heard: asyncio.Queue[str] = asyncio.Queue()
    listener = await open_listener(db, "chatgate_test_send", heard.put_nowait)
    try:
        for payload in ("first", "second"):
            await send(db, Notification("chatgate_test_send", payload))
        got = [await asyncio.wait_for(heard.get(), 10) for _ in range(2)]
    finally:
        await listener.close()
    assert got == ["first", "second"]


def test_a_payload_postgresql_would_refuse_is_refused_when_made() -> None:
    with pytest.raises(ValueError, match="too long"):
        Notification("chatgate_messages", "x" * (MAX_PAYLOAD_BYTES + 1))
