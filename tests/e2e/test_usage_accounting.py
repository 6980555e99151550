"""Usage accounting of real turns, end to end: the gateway under uvicorn, the demo model
server as a real upstream, httpx over loopback; every test on SQLite and on PostgreSQL.

Every upstream call of a turn (title, summary, main) must be one llm_calls row and one entry
of metadata.processingDetails.llm_calls, metadata.tokens their total, the usage source
honest, the cost null when the model has no price, and the daily rollup equal to the raw
rows."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from app.demo_llm.scenarios import (
    apply_max_tokens,
    chat_input,
    count_tokens,
    plan_completion,
    plan_reply,
    prompt_tokens,
    split_context,
)
from app.store.db import Database
from app.store.models import LlmCall
from app.threads import repository as thread_store
from app.usage import reports_repository as usage_reports
from app.usage import rollups as usage_rollups
from tests.e2e.helpers import keyed_client, messages, new_thread, read_then_leave, wait_for_status
from tests.support.gateway import (
    DemoLlm,
    GatewayPool,
    LiveGateway,
    StartGateway,
    post_turn,
)

UNKNOWN_MODEL = "mystery-model-7"
#: Small enough that the 4th turn of a thread of short questions overflows it.
TIGHT_BUDGET_CHARS = 1200


# -- fixtures and helpers -----------------------------------------------------------------


@pytest.fixture(scope="module")
def tight_gateway(
    live_backend: str, demo_llm: DemoLlm, live_log_dir: Path
) -> Iterator[LiveGateway]:
    """A gateway whose model has no price and whose context budget is small."""
    with GatewayPool(live_log_dir) as pool:
        yield pool.start(live_backend, upstream=demo_llm, env={
            "CHATGATE_UPSTREAM_MODEL": UNKNOWN_MODEL,
            "CHATGATE_CONTEXT_BUDGET_CHARS": str(TIGHT_BUDGET_CHARS),
        })


@pytest.fixture
async def store(gateway: LiveGateway) -> AsyncIterator[Database]:
    db = Database(gateway.database_url)
    yield db
    await db.dispose()


async def call_rows(database_url: str, message_id: str) -> list[LlmCall]:
    """The llm_calls rows of one assistant message, in call order."""
    db = Database(database_url)
    try:
        async with db.transaction() as s:
            result = await s.execute(
                select(LlmCall).where(LlmCall.message_id == uuid.UUID(message_id))
                .order_by(LlmCall.started_at)
            )
            return list(result.scalars())
    finally:
        await db.dispose()


def demo_bodies(demo: DemoLlm, text: str, *, stream: bool) -> list[dict[str, Any]]:
    """Request bodies the demo server received (streamed or not) whose user text, after any
    MSG_CONTEXT block, contains `text`; oldest first."""
    return [
        r["body"] for r in demo.requests(200)
        if bool(r["body"].get("stream")) == stream
        and text in split_context(r["body"]["messages"][-1]["content"])[1]
    ]


def tag() -> str:
    """Makes a test's messages unique on the demo server, which every test shares."""
    return uuid.uuid4().hex[:8]


def demo_usage(body: dict[str, Any]) -> tuple[int, int]:
    """(prompt, completion) tokens the demo server reports for a request it received."""
    chat = chat_input(body["messages"])
    reply = plan_reply(chat) if body.get("stream") else plan_completion(chat)
    reply = apply_max_tokens(reply, body.get("max_tokens"))
    return prompt_tokens(body["messages"]), count_tokens(reply.text)


def assert_tokens_add_up(meta: dict[str, Any]) -> None:
    calls = meta["processingDetails"]["llm_calls"]
    usages = [c["response"]["usage"] for c in calls]
    assert meta["tokens"] == sum(u["total_tokens"] for u in usages)
    assert meta["prompt_tokens"] == sum(u["prompt_tokens"] for u in usages)
    assert meta["completion_tokens"] == sum(u["completion_tokens"] for u in usages)
    for call in calls:
        assert set(call) >= {"stage", "description", "request", "response", "timestamp",
                             "duration_ms", "usage_source", "cost_usd", "status"}
        assert set(call["request"]) == {"model", "temperature", "max_tokens"}


def msg_context(body: dict[str, Any]) -> dict[str, Any]:
    """The MSG_CONTEXT JSON of a main request."""
    content = body["messages"][-1]["content"]
    start = len("<!-- MSG_CONTEXT: ")
    payload: dict[str, Any] = json.loads(content[start:content.index(" -->\n")])
    return payload


# -- usage sources ------------------------------------------------------------------------


async def test_provider_usage_equals_the_demo_servers_figures(
    gateway: LiveGateway, demo_llm: DemoLlm
) -> None:
    async with await keyed_client(gateway, "provider") as client:
        thread_id = await new_thread(client, "named already")  # no title call
        content = f"How are usage figures counted, provider edition? {tag()}"
        result = await post_turn(client, thread_id, content)
        stored = (await messages(client, thread_id))[-1]
    (body,) = demo_bodies(demo_llm, content, stream=True)
    prompt, completion = demo_usage(body)
    usage = result.one("usage")
    assert usage == {"prompt_tokens": prompt, "completion_tokens": completion,
                     "total_tokens": prompt + completion, "cost_usd": 0.0,
                     "usage_source": "provider", "reasoning_tokens": None}
    meta = stored["metadata"]
    assert (meta["prompt_tokens"], meta["completion_tokens"], meta["tokens"]) == (
        prompt, completion, prompt + completion)
    (call,) = meta["processingDetails"]["llm_calls"]
    assert call["stage"] == "main" and call["usage_source"] == "provider"
    assert call["response"]["usage"]["total_tokens"] == prompt + completion
    (row,) = await call_rows(gateway.database_url, stored["id"])
    assert (row.stage, row.prompt_tokens, row.completion_tokens, row.usage_source) == (
        "main", prompt, completion, "provider")


async def test_missing_usage_chunk_is_estimated_not_zero(
    gateway: LiveGateway, demo_llm: DemoLlm
) -> None:
    async with await keyed_client(gateway, "estimated") as client:
        thread_id = await new_thread(client, "named")
        content = f"Count me without a usage chunk [no-usage] {tag()}"
        result = await post_turn(client, thread_id, content)
        stored = (await messages(client, thread_id))[-1]
    usage = result.one("usage")
    assert usage["usage_source"] == "estimated"
    assert usage["prompt_tokens"] > 0 and usage["completion_tokens"] > 0
    # the estimate is in the right range of what the model really processed
    (body,) = demo_bodies(demo_llm, content, stream=True)
    real_prompt, real_completion = demo_usage(body)
    assert real_prompt / 2 <= usage["prompt_tokens"] <= real_prompt * 2
    assert real_completion / 2 <= usage["completion_tokens"] <= real_completion * 2
    assert stored["metadata"]["usage_source"] == "estimated"
    assert stored["metadata"]["tokens"] == usage["total_tokens"]
    (row,) = await call_rows(gateway.database_url, stored["id"])
    assert row.usage_source == "estimated" and row.total_tokens == usage["total_tokens"]


async def test_interrupted_stream_without_usage_is_partial_not_zero(
    live_backend: str, slow_demo_llm: DemoLlm, start_gateway: StartGateway
) -> None:
    gateway = start_gateway(live_backend, upstream=slow_demo_llm)
    async with await keyed_client(gateway, "leaver", over_http=True) as client:
        thread_id = await new_thread(client, "named")
        await read_then_leave(client, thread_id, "[long] a lot please")
        stored = await wait_for_status(client, thread_id, "interrupted")
    meta = stored["metadata"]
    assert meta["usage_source"] == "partial"
    assert meta["prompt_tokens"] > 0 and meta["completion_tokens"] > 0
    (call,) = meta["processingDetails"]["llm_calls"]
    assert (call["stage"], call["status"], call["usage_source"]) == (
        "main", "interrupted", "partial")
    (row,) = await call_rows(gateway.database_url, stored["id"])
    assert (row.usage_source, row.status, row.total_tokens) == (
        "partial", "interrupted", meta["tokens"])
    assert row.total_tokens > 0


# -- title calls --------------------------------------------------------------------------


async def test_first_turn_title_call_is_counted_and_names_the_thread(
    gateway: LiveGateway, demo_llm: DemoLlm
) -> None:
    async with await keyed_client(gateway, "titler") as client:
        thread_id = await new_thread(client)
        content = f"How do I repair a bicycle tyre quickly? {tag()}"
        first = await post_turn(client, thread_id, content)
        second = await post_turn(client, thread_id, "And the inner tube?")
        rows = await messages(client, thread_id)
        listed = (await client.get("/api/threads")).json()["threads"]
    assert first.one("message_end")["status"] == "complete"
    assistant = rows[1]
    meta = assistant["metadata"]
    calls = meta["processingDetails"]["llm_calls"]
    assert [(c["stage"], c["status"], c["usage_source"]) for c in calls] == [
        ("title", "complete", "provider"), ("main", "complete", "provider")]
    assert_tokens_add_up(meta)
    assert first.one("usage")["total_tokens"] == meta["tokens"]
    assert calls[0]["request"]["max_tokens"] < calls[1]["request"]["max_tokens"]
    assert {"title", "context", "llm_calls"} <= set(meta["processingDetails"]["pipeline_stages"])
    # the title call's usage is what the demo server reported for it
    (title_body,) = demo_bodies(demo_llm, content, stream=False)
    prompt, completion = demo_usage(title_body)
    assert calls[0]["response"]["usage"] == {
        "prompt_tokens": prompt, "completion_tokens": completion,
        "total_tokens": prompt + completion}
    # two llm_calls rows whose sum is metadata.tokens
    stored_rows = await call_rows(gateway.database_url, assistant["id"])
    assert [r.stage for r in stored_rows] == ["title", "main"]
    assert sum(r.total_tokens for r in stored_rows) == meta["tokens"]
    # the thread is named, and only the first turn pays for it
    (thread,) = [t for t in listed if t["id"] == thread_id]
    assert thread["title"] == "How do I repair a bicycle"
    assert [c["stage"] for c in rows[3]["metadata"]["processingDetails"]["llm_calls"]] == [
        "main"]
    assert second.one("message_end")["status"] == "complete"


async def test_failed_title_call_is_recorded_and_the_turn_goes_on(
    gateway: LiveGateway
) -> None:
    async with await keyed_client(gateway, "untitled") as client:
        thread_id = await new_thread(client)
        result = await post_turn(client, thread_id, "[title-error] name this if you can")
        rows = await messages(client, thread_id)
        listed = (await client.get("/api/threads")).json()["threads"]
    assert result.one("message_end")["status"] == "complete"
    assert result.text and rows[-1]["content"] == result.text
    meta = rows[-1]["metadata"]
    title, main = meta["processingDetails"]["llm_calls"]
    assert (title["stage"], title["status"], title["usage_source"]) == (
        "title", "failed", "partial")
    assert title["error"].startswith("upstream_error")
    assert title["response"]["usage"]["prompt_tokens"] > 0  # the request was sent: estimated
    assert (main["stage"], main["status"]) == ("main", "complete")
    assert meta["usage_source"] == "provider"  # the message's source is its answer's
    assert_tokens_add_up(meta)
    assert [t["title"] for t in listed if t["id"] == thread_id] == [None]
    stored_rows = await call_rows(gateway.database_url, rows[-1]["id"])
    assert [(r.stage, r.status) for r in stored_rows] == [("title", "failed"),
                                                          ("main", "complete")]
    warnings = [line for line in gateway.logs()
                if line.get("event") == "title_call_failed"
                and line.get("message_id") == rows[-1]["id"]]
    assert len(warnings) == 1 and warnings[0]["level"] == "warning"


# -- unknown model and summary calls (the tight gateway) ----------------------------------


async def test_unknown_model_costs_null_everywhere_and_warns_once(
    tight_gateway: LiveGateway
) -> None:
    async with await keyed_client(tight_gateway, "unpriced") as client:
        results = []
        for n in range(2):
            thread_id = await new_thread(client)
            results.append(await post_turn(client, thread_id, f"Price me, turn {n}"))
        stored = (await messages(client, thread_id))[-1]
    for result in results:
        usage = result.one("usage")
        assert usage["cost_usd"] is None and usage["total_tokens"] > 0
    meta = stored["metadata"]
    assert meta["model"] == UNKNOWN_MODEL and meta["cost_usd"] is None
    calls = meta["processingDetails"]["llm_calls"]
    assert [c["stage"] for c in calls] == ["title", "main"]
    assert all(c["cost_usd"] is None for c in calls)
    stored_rows = await call_rows(tight_gateway.database_url, stored["id"])
    assert [r.cost_usd for r in stored_rows] == [None, None]
    assert {r.model for r in stored_rows} == {UNKNOWN_MODEL}
    warned = [line for line in tight_gateway.logs() if line.get("event") == "unknown_model_price"]
    assert len(warned) == 1 and warned[0]["model"] == UNKNOWN_MODEL
    assert warned[0]["level"] == "warning"


async def test_summary_call_is_counted_and_carried_in_msg_context(
    tight_gateway: LiveGateway, demo_llm: DemoLlm
) -> None:
    run = tag()
    questions = [f"Question {n} of the summary thread {run}: what about topic {n}?"
                 for n in range(1, 6)]
    async with await keyed_client(tight_gateway, "summarised") as client:
        thread_id = await new_thread(client, "long talk")
        for question in questions:
            result = await post_turn(client, thread_id, question)
            assert result.one("message_end")["status"] == "complete"
        rows = await messages(client, thread_id)
    stages = [[c["stage"] for c in r["metadata"]["processingDetails"]["llm_calls"]]
              for r in rows if r["role"] == "assistant"]
    assert stages[:3] == [["main"]] * 3  # the history still fits
    assert stages[3:] == [["summary", "main"]] * 2
    fourth = rows[7]["metadata"]
    assert_tokens_add_up(fourth)
    assert "summary" in fourth["processingDetails"]["pipeline_stages"]
    summary_call = fourth["processingDetails"]["llm_calls"][0]
    assert summary_call["status"] == "complete" and summary_call["usage_source"] == "provider"
    stored_rows = await call_rows(tight_gateway.database_url, rows[7]["id"])
    assert [r.stage for r in stored_rows] == ["summary", "main"]
    assert sum(r.total_tokens for r in stored_rows) == fourth["tokens"]

    # turn 4 summarised the turns that fell out (the first question), before its main call
    first_summary, second_summary = demo_bodies(demo_llm, run, stream=False)
    assert questions[0] in first_summary["messages"][-1]["content"]
    assert "(none yet)" in first_summary["messages"][-1]["content"]
    (main4,) = demo_bodies(demo_llm, questions[3], stream=True)
    (main5,) = demo_bodies(demo_llm, questions[4], stream=True)
    context4 = msg_context(main4)
    assert context4["summary"].startswith("The conversation so far is about:")
    assert questions[0] not in json.dumps(context4["history"])
    # turn 5 re-summarised incrementally: the previous summary + only the newly dropped turns
    new_part, _, previous = second_summary["messages"][-1]["content"].partition(
        "Summary so far: ")
    assert previous == context4["summary"]
    assert questions[0] not in new_part and questions[1] in new_part
    context5 = msg_context(main5)
    db = Database(tight_gateway.database_url)
    try:
        async with db.transaction() as s:
            thread = await thread_store.get_thread(s, "summarised", uuid.UUID(thread_id))
    finally:
        await db.dispose()
    assert thread is not None and thread.summary == context5["summary"]
    assert context5["summary"] != context4["summary"]


# -- the rollup after a mixed workload ----------------------------------------------------


async def test_rollup_equals_raw_calls_after_a_mixed_workload(
    gateway: LiveGateway, store: Database
) -> None:
    users = {"mix-a": ["hello [no-usage]", "[title-error] second", "third [truncated]"],
             "mix-b": ["[seed-bug] ahoj", "[error-before] boom", "plain words [long]"]}

    async def run(user: str, contents: list[str]) -> list[dict[str, Any]]:
        async with await keyed_client(gateway, user) as client:
            for content in contents:
                await post_turn(client, await new_thread(client), content)
            stored: list[dict[str, Any]] = []
            for thread in (await client.get("/api/threads")).json()["threads"]:
                stored += [m for m in await messages(client, thread["id"])
                           if m["role"] == "assistant"]
            return stored

    per_user = dict(zip(users, await asyncio.gather(*(run(u, c) for u, c in users.items())),
                        strict=True))
    today = dt.datetime.now(dt.UTC).date()
    days = (today - dt.timedelta(days=1), today + dt.timedelta(days=1))
    raw = await usage_rollups.raw_usage(store, *days)
    async with store.transaction() as s:
        rollup = await usage_reports.stored_rollups(s, *days)
    mismatches = [m for day in (days[0], today, days[1])
                  for m in await usage_rollups.verify_day(store, day)]
    assert mismatches == []
    for user, assistants in per_user.items():
        assert len(assistants) == 3
        mine = {key: figures for key, figures in rollup.items() if key[0] == user}
        assert mine == {key: figures for key, figures in raw.items() if key[0] == user}
        # ... and both equal what the messages themselves say
        entries = [c for m in assistants for c in m["metadata"]["processingDetails"]["llm_calls"]]
        assert sum(f.total_tokens for f in mine.values()) == sum(
            m["metadata"]["tokens"] for m in assistants) > 0
        assert sum(f.llm_call_count for f in mine.values()) == len(entries)
        assert sum(f.message_count for f in mine.values()) == sum(
            1 for m in assistants if m["metadata"]["processingDetails"]["llm_calls"])
