"""The usage API over real HTTP: the gateway under uvicorn (tests.support.gateway) with the demo
model server, on SQLite and PostgreSQL."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import httpx
import pytest

from app.demo_llm.scenarios import chat_input, count_tokens, plan_reply
from app.store.db import Database
from app.usage import rollups as usage_rollups
from tests.e2e.helpers import keyed_client, messages, new_thread
from tests.support.gateway import DemoLlm, LiveGateway, post_turn
from tests.usage_accounting.workload import DAY1, DAY2, DAY3, mixed_workload


@pytest.fixture(scope="module")
def seeded(gateway: LiveGateway) -> LiveGateway:
    """The module's gateway with the mixed workload (users alice and bob) in its database,
    written through the store's finish path on pinned UTC days."""
    import asyncio

    async def seed() -> None:
        db = Database(gateway.database_url)
        patch = pytest.MonkeyPatch()
        try:
            await mixed_workload(db, patch)
        finally:
            patch.undo()
            await db.dispose()

    asyncio.run(seed())
    return gateway


async def _get(client: httpx.AsyncClient, path: str, **params: str) -> Any:
    response = await client.get(path, params=params)
    assert response.status_code == 200, response.text
    return response.json()


async def test_real_turns_show_up_in_the_callers_usage(seeded: LiveGateway) -> None:
    async with await keyed_client(seeded, "turner") as client:
        thread_id = await new_thread(client)
        for question in ("hello there", "and a second question"):
            result = await post_turn(client, thread_id, question)
            assert result.one("message_end")["status"] == "complete"
        stored = [m for m in await messages(client, thread_id) if m["role"] == "assistant"]
        tokens = sum(m["metadata"]["tokens"] for m in stored)
        models = {m["metadata"]["model"] for m in stored}

        by_model = await _get(client, "/api/usage", group_by="model")
        by_day = await _get(client, "/api/usage")

    today = dt.datetime.now(dt.UTC).date().isoformat()
    assert by_model["user_id"] == "turner" and by_model["end"] == today
    assert by_model["totals"]["total_tokens"] == tokens > 0
    assert by_model["totals"]["message_count"] == 2
    assert [row["model"] for row in by_model["rows"]] == sorted(models)
    assert by_day["group_by"] == "day"
    assert [row["day"] for row in by_day["rows"]] == [today]
    assert by_day["totals"] == by_model["totals"]
    assert by_day["messages"]["message_count"] == 2
    assert by_day["messages"]["conversation_count"] == 1
    assert by_day["messages"]["total_tokens"] == tokens
    # and the live rollup equals the raw llm_calls rows
    db = Database(seeded.database_url)
    try:
        assert await usage_rollups.verify_day(db, dt.datetime.now(dt.UTC).date()) == []
    finally:
        await db.dispose()


async def test_usage_by_day_and_by_model(seeded: LiveGateway) -> None:
    window = {"start": DAY1.isoformat(), "end": DAY3.isoformat()}
    async with await keyed_client(seeded, "alice") as client:
        by_day = await _get(client, "/api/usage", **window, group_by="day")
        by_model = await _get(client, "/api/usage", **window, group_by="model")
        day2_only = await _get(client, "/api/usage", start=DAY2.isoformat(),
                               end=DAY2.isoformat())

    days = {row["day"]: row for row in by_day["rows"]}
    assert list(days) == [DAY1.isoformat(), DAY2.isoformat(), DAY3.isoformat()]
    assert days[DAY1.isoformat()]["total_tokens"] == 25 + 1200 + 1500 + 833
    assert days[DAY1.isoformat()]["message_count"] == 3
    assert days[DAY1.isoformat()]["llm_call_count"] == 4
    # the reasoning tokens the provider reported (part of completion_tokens); 0 when none
    assert days[DAY1.isoformat()]["reasoning_tokens"] == 150
    assert days[DAY2.isoformat()]["reasoning_tokens"] == 0
    models = {row["model"]: row for row in by_model["rows"]}
    assert set(models) == {"gpt-4o", "gpt-4o-mini", "local-llama"}
    # an unpriced model: cost null, not 0, with the number of calls it is missing
    assert models["local-llama"]["cost_usd"] is None
    assert models["local-llama"]["unpriced_call_count"] == 2
    assert (models["gpt-4o"]["reasoning_tokens"], models["local-llama"]["reasoning_tokens"]) == (
        150, 0)
    assert models["gpt-4o"]["cost_usd"] == pytest.approx(0.0045 + 0.00375 + 0.00233 + 0.00525)
    assert by_day["totals"] == by_model["totals"]
    assert by_day["totals"]["unpriced_call_count"] == 2
    assert by_day["totals"]["cost_usd"] == pytest.approx(
        0.000006 + 0.0045 + 0.00375 + 0.00233 + 0.00054 + 0.00525 + 0.0000039)
    assert by_day["messages"]["conversation_count"] == 2
    assert [row["day"] for row in day2_only["rows"]] == [DAY2.isoformat()]
    # another user's usage is not in alice's
    assert all(row["total_tokens"] != 110 for row in by_day["rows"])


async def test_admin_reads_any_user_and_others_get_403(seeded: LiveGateway) -> None:
    window = {"start": DAY1.isoformat(), "end": DAY3.isoformat()}
    async with await keyed_client(seeded, "bob") as bob:
        own = await _get(bob, "/api/usage", **window)
        refused = await bob.get("/api/admin/usage", params={"user_id": "alice", **window})
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "forbidden"
    assert own["totals"]["total_tokens"] == 110 + 275

    async with seeded.client(await seeded.api_key("root", admin=True)) as admin:
        alice = await _get(admin, "/api/admin/usage", user_id="alice", **window)
        bob_seen = await _get(admin, "/api/admin/usage", user_id="bob", **window)
        missing = await admin.get("/api/admin/usage", params=window)
    assert alice["user_id"] == "alice" and alice["totals"]["message_count"] == 6
    assert bob_seen == own
    assert missing.status_code == 422
    assert missing.json()["error"]["code"] == "invalid_query"


@pytest.mark.parametrize(("path", "params"), [
    ("/api/usage", {"start": "yesterday"}),
    ("/api/usage", {"end": "2026-02-30"}),
    ("/api/usage", {"start": "20261101"}),
    ("/api/usage", {"group_by": "week"}),
    ("/api/usage", {"start": "2026-11-22", "end": "2026-11-01"}),
    ("/api/usage", {"start": "2020-01-01", "end": "2026-01-01"}),
    ("/api/admin/usage", {"user_id": "alice", "group_by": "user"}),
])
async def test_bad_query_is_422_json(
    seeded: LiveGateway, path: str, params: dict[str, str]
) -> None:
    async with seeded.client(await seeded.api_key("root", admin=True)) as client:
        response = await client.get(path, params=params)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_query" and error["message"]


@pytest.mark.parametrize("user_id", [
    "a\x00b",            # a NUL: PostgreSQL cannot even be asked about it
    "tab\there",
    "line\nbreak",
    "bell\x07",
    "del\x7f",
    "c1\x85",
    "x" * 256,            # longer than any stored user id
])
async def test_admin_user_id_that_cannot_be_a_user_is_422_json(
    seeded: LiveGateway, user_id: str
) -> None:
    async with seeded.client(await seeded.api_key("root", admin=True)) as admin:
        response = await admin.get("/api/admin/usage", params={"user_id": user_id})
        still_fine = await admin.get("/api/admin/usage", params={"user_id": "alice"})
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_user_id" and "user_id" in error["message"]
    assert still_fine.status_code == 200


async def test_admin_user_id_may_be_any_printable_text(seeded: LiveGateway) -> None:
    """Only control characters and over-long ids are refused: spaces, accents and 255
    characters are a user id like any other (a user nobody has is an empty report)."""
    async with seeded.client(await seeded.api_key("root", admin=True)) as admin:
        for user_id in ("jana novák", "ülrich@example.org", "y" * 255):
            answer = await _get(admin, "/api/admin/usage", user_id=user_id)
            assert answer["user_id"] == user_id
            assert answer["totals"]["message_count"] == 0 and answer["rows"] == []


async def test_usage_needs_a_key(seeded: LiveGateway) -> None:
    async with seeded.client() as anonymous:
        for path in ("/api/usage", "/api/admin/usage?user_id=alice"):
            response = await anonymous.get(path)
            assert response.status_code == 401
            assert response.json()["error"]["code"] == "unauthorized"


async def test_a_thinking_models_reasoning_tokens_reach_the_call_and_the_usage(
        seeded: LiveGateway, demo_llm: DemoLlm) -> None:
    """The demo model thinks ([think]) and reports its reasoning tokens: they are stored
    with the main call, shown in its metadata entry and summed by the usage API."""
    async with await keyed_client(seeded, "thinker") as client:
        thread_id = await new_thread(client)
        question = "why is the sea salty? [think]"
        result = await post_turn(client, thread_id, question)
        assert result.one("message_end")["status"] == "complete"
        stored = (await messages(client, thread_id))[-1]
        usage = await _get(client, "/api/usage", group_by="model")
    body = next(r["body"] for r in reversed(demo_llm.requests(50))
                if r["body"].get("stream") and question in json.dumps(r["body"]))
    reply = plan_reply(chat_input(body["messages"]))
    expected = count_tokens(reply.thinking_sent(len(reply.pieces)))
    [main] = [c for c in stored["metadata"]["processingDetails"]["llm_calls"]
              if c["stage"] == "main"]
    assert main["response"]["usage"]["completion_tokens_details"] == {
        "reasoning_tokens": expected}
    assert usage["totals"]["reasoning_tokens"] == expected > 0
    assert usage["totals"]["completion_tokens"] >= expected
