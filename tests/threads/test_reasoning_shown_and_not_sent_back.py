"""An answer's reasoning as the messages API shows it (apart from its text, null when it had
none), and never sent back to the model: the next request's messages and its MSG_CONTEXT
carry each earlier answer's text only. Through a real gateway and the demo model server."""

from __future__ import annotations

import json
import uuid

from app.store.db import Database
from app.threads import repository as threads_store
from tests.e2e.helpers import keyed_client, messages, new_thread
from tests.store.factories import turn
from tests.support.gateway import DemoLlm, LiveGateway, post_turn

THOUGHT = "SECRET-THOUGHT: the user seems to want a greeting"


async def _thought_turn(gateway: LiveGateway, user: str, thread_id: str) -> None:
    """An earlier answer that reasoned, stored as the finish stores one."""
    db = Database(gateway.database_url)
    try:
        async with db.transaction(read_only=True) as s:
            thread = await threads_store.get_thread(s, user, uuid.UUID(thread_id))
        assert thread is not None
        await turn(db, thread, "say hello", "Hello there!", reasoning=THOUGHT,
                   reasoning_ms=1500)
    finally:
        await db.dispose()


async def test_the_messages_api_shows_an_answers_reasoning_apart(gateway: LiveGateway) -> None:
    async with await keyed_client(gateway, "reasoner") as client:
        thread_id = await new_thread(client)
        await _thought_turn(gateway, "reasoner", thread_id)
        plain = await post_turn(client, thread_id, "and now plainly")
        assert plain.one("message_end")["status"] == "complete"
        rows = await messages(client, thread_id)
    question, thought, _, answer = rows
    assert (thought["content"], thought["reasoning"], thought["reasoning_ms"]) == (
        "Hello there!", THOUGHT, 1500)
    assert THOUGHT not in json.dumps(thought["metadata"])
    assert (answer["reasoning"], answer["reasoning_ms"]) == (None, None)
    assert "reasoning" not in question  # a user's message has none to show


async def test_the_next_request_carries_the_answers_text_and_never_its_reasoning(
        gateway: LiveGateway, demo_llm: DemoLlm) -> None:
    async with await keyed_client(gateway, "reasoner2") as client:
        thread_id = await new_thread(client)
        await _thought_turn(gateway, "reasoner2", thread_id)
        marker = f"next question {uuid.uuid4()}"
        result = await post_turn(client, thread_id, marker)
        assert result.one("message_end")["status"] == "complete"
    body = next(r["body"] for r in reversed(demo_llm.requests(50))
                if marker in json.dumps(r["body"]))
    sent = json.dumps(body, ensure_ascii=False)
    assert "Hello there!" in sent  # the earlier answer is in the history
    assert "SECRET-THOUGHT" not in sent and "greeting" not in sent
    assert "reasoning" not in sent
