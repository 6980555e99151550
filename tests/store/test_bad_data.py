"""NUL, any Unicode and over-long content, on both backends."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select

from app.store import ContentTooLong
from app.store.db import Database
from app.store.models import Message, Thread
from app.turn.rows import MAX_CONTENT_CHARS, Opened, OpeningRequest, turn_rows
from tests.store.factories import finish, new_thread, open_rows, turn

UNICODE_SAMPLES = [
    "emoji 😀🎉 family 👨‍👩‍👧‍👦 flag 🇨🇿 skin 👍🏽",
    "combining: e\u0301 a\u0308 ñ vs n\u0303 (not normalised)",
    "Příliš žluťoučký kůň úpěl ďábelské ódy",
    "RTL: שלום مرحبا and CJK 漢字かなカナ 한국어",
    "astral 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𐍈 and zero-width\u200b\u200djoiner, BOM \ufeff",
    "line\u2028separator\u2029paragraph\r\nCRLF\ttab \\ backslash \"quotes\" '",
    "<!-- METADATA: {\"language\": \"xx\"} --> --> &amp; \u003c",
]


async def _open(db: Database, thread: Thread, content: str, *,
                max_chars: int = MAX_CONTENT_CHARS) -> Opened:
    """A turn opened with its question limited to `max_chars` (the API's setting)."""
    opened = await turn_rows(db).open(OpeningRequest(thread.user_id, thread.id, content,
                                                     max_chars=max_chars))
    assert isinstance(opened, Opened), opened
    return opened


async def _reread(db: Database, message_id: object) -> Message:
    async with db.transaction() as s:
        row = (await s.execute(select(Message).where(Message.id == message_id))).scalar_one()
    return row


@pytest.mark.parametrize("text", UNICODE_SAMPLES)
async def test_unicode_round_trips_exactly(db: Database, text: str) -> None:
    thread = await new_thread(db, title=text)
    user, assistant = await turn(db, thread, text, text[::-1],
                                 metadata={"tokens": 1, "echo": text, text: [text]})
    assert (await _reread(db, user.id)).content == text
    again = await _reread(db, assistant.id)
    assert again.content == text[::-1]
    assert again.meta == {"tokens": 1, "echo": text, text: [text]}
    assert "sanitized" not in again.meta


async def test_nul_removed_from_content_and_every_metadata_string(db: Database) -> None:
    thread = await new_thread(db, title="ti\x00tle")
    opened = await open_rows(db, thread, "he\x00llo\x00")
    assert opened.user is not None
    metadata = {"tokens": 3, "k\x00ey": "va\x00lue",
                "nested": {"list": ["a\x00", {"deep": "\x00\x00"}]}}
    await finish(db, opened.assistant.id, "an\x00swer", metadata=metadata, calls=[])
    stored_user = await _reread(db, opened.user.id)
    stored = await _reread(db, opened.assistant.id)
    assert stored_user.content == "hello"
    assert stored_user.meta == {"sanitized": {"nul_removed": 2}}
    assert stored.content == "answer"
    assert stored.meta == {"tokens": 3, "key": "value",
                           "nested": {"list": ["a", {"deep": ""}]},
                           "sanitized": {"nul_removed": 6}}
    async with db.transaction() as s:
        from app.threads.repository import get_thread
        reread_thread = await get_thread(s, "alice", thread.id)
    assert reread_thread is not None and reread_thread.title == "title"


async def test_lone_surrogates_replaced_and_noted(db: Database) -> None:
    thread = await new_thread(db)
    _, assistant = await turn(db, thread, "q", "broken \ud83d pair \udc00",
                              metadata={"tokens": 1, "x": "\ud800"})
    stored = await _reread(db, assistant.id)
    assert stored.content == "broken \ufffd pair \ufffd"
    assert stored.meta == {"tokens": 1, "x": "\ufffd", "sanitized": {"surrogates_replaced": 3}}


async def test_non_finite_numbers_in_metadata_become_null(db: Database) -> None:
    thread = await new_thread(db)
    _, assistant = await turn(db, thread, "q", "a",
                              metadata={"tokens": 1, "ratio": float("nan"),
                                        "big": float("inf")})
    stored = await _reread(db, assistant.id)
    assert stored.meta == {"tokens": 1, "ratio": None, "big": None,
                           "sanitized": {"non_finite_replaced": 2}}


async def test_over_long_content_refused_before_the_database(db: Database) -> None:
    thread = await new_thread(db)
    ok = await _open(db, thread, "é" * 100, max_chars=100)
    assert ok.user is not None
    await finish(db, ok.assistant.id, "", status="failed", calls=[])  # the thread is free
    with pytest.raises(ContentTooLong) as refused:
        await _open(db, thread, "é" * 101, max_chars=100)
    assert ok.user.content == "é" * 100
    assert refused.value.limit == 100 and refused.value.length == 101
    assert "100" in str(refused.value)
    with pytest.raises(ContentTooLong):
        await _open(db, thread, "x" * (MAX_CONTENT_CHARS + 1))
    async with db.transaction() as s:  # the accepted turn's two rows, none of the refused
        assert await s.scalar(select(func.count()).select_from(Message)) == 2


async def test_content_at_the_default_limit_is_stored(db: Database) -> None:
    thread = await new_thread(db)
    text = "🙂" * MAX_CONTENT_CHARS  # characters, not bytes, are counted
    message = (await _open(db, thread, text)).user
    assert message is not None
    assert (await _reread(db, message.id)).content == text
