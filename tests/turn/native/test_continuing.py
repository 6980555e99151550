"""Continue: the thread's last answer, cut at its token limit, finished in place over the
native API (POST .../messages/{id}/continue), on both databases: one answer row whose text
goes on from the cut, both calls billed, and a plain 409 for any other message."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
from sqlalchemy import select

from app.demo_llm.scenarios import long_answer_text
from app.store.db import Database
from app.store.models import LlmCall, Message, UserTokenUsage
from tests.e2e.helpers import keyed_client, messages, new_thread
from tests.support.gateway import DemoLlm, LiveGateway, StartGateway, post_turn
from tests.support.gateway.sse import TurnResult, post_stream


async def continue_answer(client: httpx.AsyncClient, thread_id: str, message_id: str
                          ) -> TurnResult:
    return await post_stream(client, f"/api/threads/{thread_id}/messages/{message_id}/continue")


async def usage_rows(database_url: str, user: str, message_id: str
                     ) -> tuple[list[LlmCall], list[UserTokenUsage]]:
    db = Database(database_url)
    try:
        async with db.transaction(read_only=True) as s:
            calls = list((await s.execute(select(LlmCall).where(
                LlmCall.message_id == uuid.UUID(message_id)))).scalars())
            rollups = list((await s.execute(select(UserTokenUsage).where(
                UserTokenUsage.user_id == user, UserTokenUsage.period_type == "day")
            )).scalars())
        return calls, rollups
    finally:
        await db.dispose()


async def test_a_cut_answer_is_finished_in_place_and_both_calls_are_billed(
    live_backend: str, demo_llm: DemoLlm, start_gateway: StartGateway,
) -> None:
    """A long answer cut at a 150-token limit goes on from its last word, twice: the
    second continuation ends it."""
    gateway = start_gateway(live_backend, upstream=demo_llm,
                            env={"CHATGATE_UPSTREAM_MAX_TOKENS": "300"})
    async with await keyed_client(gateway, "continuer") as client:
        thread_id = await new_thread(client)
        first = await post_turn(client, thread_id, "[long] Tell me about tides")
        assert first.status_code == 200
        question, cut = await messages(client, thread_id)
        assert cut["metadata"]["stream"]["finish_reason"] == "length"
        going_on = await continue_answer(client, thread_id, cut["id"])
        rows = await messages(client, thread_id)
        while rows[1]["metadata"]["stream"]["finish_reason"] == "length":
            assert rows[1]["metadata"]["continued"] < 5
            assert (await continue_answer(client, thread_id, cut["id"])).status_code == 200
            rows = await messages(client, thread_id)
    assert going_on.status_code == 200, going_on.raw
    start = going_on.one("message_start")
    assert start["assistant_message_id"] == cut["id"]
    assert going_on.one("message_end")["status"] == "complete"
    sent = "".join(e.data["text"] for e in going_on.of("delta"))
    # One question, one answer: the cut text, then what the continuations sent, no repeat.
    assert [r["id"] for r in rows] == [question["id"], cut["id"]]
    answer = rows[1]
    assert answer["status"] == "complete"
    assert sent and answer["content"].startswith(cut["content"] + sent)
    assert answer["content"].strip() == long_answer_text()  # nothing repeated or lost
    assert "<!--" not in answer["content"] and "METADATA" not in answer["content"]
    meta = answer["metadata"]
    assert meta["stream"]["finish_reason"] == "stop" and meta["continued"] >= 1
    assert meta["response_metadata"]  # the METADATA comment the cut answer lacked
    calls, rollups = await usage_rows(gateway.database_url, "continuer", cut["id"])
    mains = [c for c in calls if c.stage == "main"]
    assert len(mains) == 1 + meta["continued"] and all(c.total_tokens > 0 for c in mains)
    assert meta["tokens"] == sum(c.total_tokens for c in calls)
    assert len(meta["processingDetails"]["llm_calls"]) == len(calls)
    assert sum(r.total_tokens for r in rollups) == meta["tokens"]
    assert going_on.one("usage")["total_tokens"] > first.one("usage")["total_tokens"]


async def test_only_the_last_cut_or_interrupted_answer_can_be_continued(
    gateway: LiveGateway,
) -> None:
    async with await keyed_client(gateway, "refused-continuer") as client:
        thread_id = await new_thread(client)
        assert (await post_turn(client, thread_id, "[truncated] Tell me")).status_code == 200
        assert (await post_turn(client, thread_id, "And about moons")).status_code == 200
        question, cut, _, done = await messages(client, thread_id)
        refusals: dict[str, Any] = {}
        for name, message_id in (("earlier", cut["id"]), ("complete", done["id"]),
                                 ("question", question["id"]),
                                 ("unknown", str(uuid.uuid4()))):
            refusals[name] = await continue_answer(client, thread_id, message_id)
        malformed = await client.post(f"/api/threads/{thread_id}/messages/nope/continue")
        after = await messages(client, thread_id)
    async with await keyed_client(gateway, "stranger") as stranger:
        foreign = await continue_answer(stranger, thread_id, done["id"])
    for name in ("earlier", "question"):
        assert refusals[name].status_code == 409
        assert refusals[name].body["error"] == {
            "code": "not_last_answer",
            "message": "only the thread's last answer can be continued"}
    assert refusals["complete"].status_code == 409
    assert refusals["complete"].body["error"] == {
        "code": "not_continuable", "message": "only an answer that was interrupted or cut at "
        "its token limit can be continued"}
    assert refusals["unknown"].status_code == 404 and foreign.status_code == 404
    assert malformed.status_code in (400, 404, 422)
    assert [r["id"] for r in after] == [question["id"], cut["id"], _["id"], done["id"]]
    assert after[1]["content"] == cut["content"]


async def test_an_interrupted_answer_is_finished_from_where_it_stopped(
    gateway: LiveGateway,
) -> None:
    """An answer stopped half-way (stored `interrupted` with half its text) goes on from
    its last character to the whole answer, and is `complete`."""
    async with await keyed_client(gateway, "resumer") as client:
        thread_id = await new_thread(client)
        assert (await post_turn(client, thread_id, "[long] Tell me")).status_code == 200
        _, whole = await messages(client, thread_id)
        half = whole["content"][: len(whole["content"]) // 2]
        await stop_half_way(gateway.database_url, whole["id"], half)
        [_, stopped] = await messages(client, thread_id)
        assert stopped["status"] == "interrupted"
        going_on = await continue_answer(client, thread_id, whole["id"])
        [_, answer] = await messages(client, thread_id)
    assert going_on.status_code == 200, going_on.raw
    assert answer["status"] == "complete" and answer["content"] == whole["content"]
    assert "interrupted_reason" not in answer["metadata"]
    assert "".join(e.data["text"] for e in going_on.of("delta")) == whole["content"][len(half):]


async def stop_half_way(database_url: str, message_id: str, half: str) -> None:
    """The answer as a Stop half-way would have stored it."""
    db = Database(database_url)
    try:
        async with db.transaction() as s:
            row = await s.get(Message, uuid.UUID(message_id))
            assert row is not None
            row.content, row.status = half, "interrupted"
            row.meta = {**row.meta, "interrupted_reason": "stop_request",
                        "stream": {**row.meta["stream"], "finish_reason": None}}
    finally:
        await db.dispose()
