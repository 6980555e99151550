"""Edit and resend: the thread's last exchange taken back (DELETE .../messages/{id}), on both
databases, as a service and over HTTP."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import func, select

from app.store.db import Database
from app.store.models import LlmCall
from app.threads.service import thread_messages
from app.turn.take_back import ExchangeRefused, take_back_last_exchange
from tests.e2e.helpers import keyed_client, messages, new_thread
from tests.store.factories import finish, open_rows, turn
from tests.store.factories import new_thread as stored_thread
from tests.support.gateway import LiveGateway, post_turn


async def history(db: Database, user: str, thread_id: uuid.UUID) -> list[str]:
    rows = await thread_messages(db, user, thread_id, include_synthetic=True)
    assert rows is not None
    return [row["content"] for row in rows]


async def test_the_last_question_and_its_answer_go(db: Database) -> None:
    thread = await stored_thread(db, "alice")
    await turn(db, thread, "q1", "a1")
    question, _ = await turn(db, thread, "q2", "a2")
    assert await take_back_last_exchange(db, "alice", thread.id, question.id) == 2
    assert await history(db, "alice", thread.id) == ["q1", "a1"]
    async with db.transaction(read_only=True) as session:  # the usage of the answer stays billed
        calls = await session.scalar(select(func.count(LlmCall.id)))
    assert calls is not None and calls >= 2


async def test_only_the_last_exchange_and_only_the_owners(db: Database) -> None:
    thread = await stored_thread(db, "alice")
    first, _ = await turn(db, thread, "q1", "a1")
    _, answer = await turn(db, thread, "q2", "a2")
    for earlier in (first.id, answer.id):
        with pytest.raises(ExchangeRefused) as refused:
            await take_back_last_exchange(db, "alice", thread.id, earlier)
        assert refused.value.code == "not_last_message"
    assert await take_back_last_exchange(db, "bob", thread.id, answer.id) is None
    assert await take_back_last_exchange(db, "alice", thread.id, uuid.uuid4()) is None
    other = await stored_thread(db, "alice")
    assert await take_back_last_exchange(db, "alice", other.id, first.id) is None
    assert await history(db, "alice", thread.id) == ["q1", "a1", "q2", "a2"]


async def test_never_while_an_answer_streams(db: Database) -> None:
    thread = await stored_thread(db, "alice")
    opened = await open_rows(db, thread, "q1")
    assert opened.user is not None
    with pytest.raises(ExchangeRefused) as refused:
        await take_back_last_exchange(db, "alice", thread.id, opened.user.id)
    assert refused.value.code == "thread_busy"
    await finish(db, opened.assistant.id, "a1")
    assert await take_back_last_exchange(db, "alice", thread.id, opened.user.id) == 2


async def test_over_http_then_the_edited_text_is_sent(gateway: LiveGateway) -> None:
    async with await keyed_client(gateway, "editor") as client:
        thread_id = await new_thread(client)
        for text in ("First question", "Secnd question"):
            assert (await post_turn(client, thread_id, text)).status_code == 200
        rows = await messages(client, thread_id)
        first, last = rows[0]["id"], rows[2]["id"]
        path = f"/api/threads/{thread_id}/messages"
        earlier = await client.delete(f"{path}/{first}")
        unknown = await client.delete(f"{path}/{uuid.uuid4()}")
        malformed = await client.delete(f"{path}/not-an-id")
        taken = await client.delete(f"{path}/{last}")
        again = await client.delete(f"{path}/{last}")
        assert (await post_turn(client, thread_id, "Second question")).status_code == 200
        after = await messages(client, thread_id)
    async with await keyed_client(gateway, "stranger") as stranger:
        foreign = await stranger.delete(f"{path}/{first}")
    assert taken.status_code == 204
    assert (earlier.status_code, earlier.json()["error"]["code"]) == (409, "not_last_message")
    assert earlier.json()["error"]["message"] == (
        "only the last message you sent can be edited and sent again")
    for missing in (unknown, malformed, again, foreign):
        assert (missing.status_code, missing.json()["error"]["code"]) == (404, "not_found")
    assert [m["content"] for m in after][0::2] == ["First question", "Second question"]
    assert len(after) == 4
