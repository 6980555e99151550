"""A gateway SIGKILLed mid-stream: its row is swept `interrupted` (reason `process_died`)
within seconds by the restarted process, with the text the client had seen up to one
checkpoint interval, and the thread takes a new turn (no 409)."""

from __future__ import annotations

import asyncio
import time
import uuid

import httpx
from sqlalchemy import select

from app.store.db import Database
from app.store.models import LlmCall, OpenCall, UserTokenUsage
from tests.e2e.helpers import messages, new_thread
from tests.support.crash import SeenDeltas, read_deltas, recovery_env, recovery_setting
from tests.support.gateway import (
    DemoLlm,
    GatewayProcess,
    StartGatewayProcess,
    post_turn,
)

LONG = "[long] please write a lot"
#: ~10 ms a delta on slow_demo_llm: about 2 s of streaming, two checkpoints at least.
DELTAS_BEFORE_KILL = 200
#: Scheduling slack on a loaded machine, on top of one checkpoint interval.
SLACK_S = 0.5
#: Starting the second gateway (migrations checked, integrity round trip) on a busy machine.
RESTART_ALLOWANCE_S = 8.0


async def _wait_swept(client: httpx.AsyncClient, thread_id: str, timeout_s: float
                      ) -> dict[str, object]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        rows = await messages(client, thread_id)
        if rows[-1]["status"] != "streaming":
            last: dict[str, object] = rows[-1]
            return last
        await asyncio.sleep(0.05)
    raise AssertionError(f"still streaming after {timeout_s} s")


async def _crash_mid_turn(gateway: GatewayProcess, key: str, title: str | None = "crash"
                          ) -> tuple[str, SeenDeltas, float]:
    """`title` None: an untitled thread, whose first turn makes a title call first."""
    async with gateway.client(key) as client:
        thread_id = await new_thread(client, title)
        seen = await read_deltas(client, thread_id, LONG, DELTAS_BEFORE_KILL)
        killed_at = time.monotonic()
        gateway.kill9()
    return thread_id, seen, killed_at


async def test_sigkill_mid_stream_is_swept_with_the_checkpointed_text(
    live_backend: str, slow_demo_llm: DemoLlm, start_gateway_process: StartGatewayProcess
) -> None:
    env = recovery_env()
    first = start_gateway_process(live_backend, upstream=slow_demo_llm, env=env)
    key = await first.api_key("crash")
    thread_id, seen, killed_at = await _crash_mid_turn(first, key)
    second = start_gateway_process(live_backend, upstream=slow_demo_llm, env=env,
                           database_url=first.database_url)
    interval = recovery_setting(env, "CHATGATE_CHECKPOINT_INTERVAL_S")
    detection_bound = (recovery_setting(env, "CHATGATE_PROCESS_DEAD_AFTER_S")
                       + recovery_setting(env, "CHATGATE_HEARTBEAT_S") + RESTART_ALLOWANCE_S)
    async with second.client(key) as client:
        row = await _wait_swept(client, thread_id, timeout_s=detection_bound)
        detected_s = time.monotonic() - killed_at
        print(f"swept {detected_s:.1f} s after the kill; {len(seen.text)} characters seen, "
              f"{len(str(row['content']))} stored")
        assert row["status"] == "interrupted"
        assert row["metadata"]["interrupted_reason"] == "process_died"  # type: ignore[index]
        content = str(row["content"])
        assert seen.text.startswith(content)
        assert len(content) >= len(seen.text_before(killed_at - interval - SLACK_S)) > 0
        assert detected_s < detection_bound, detected_s
        again = await post_turn(client, thread_id, "are you back?")
        assert again.status_code == 200, again.body
        assert again.one("message_end")["status"] == "complete"
    assert any(line.get("event") == "dead_process_streams_interrupted" for line in second.logs())


async def _usage_of(database_url: str, user: str, message_id: str
                    ) -> tuple[list[LlmCall], list[UserTokenUsage]]:
    db = Database(database_url)
    try:
        async with db.transaction() as s:
            calls = list((await s.execute(select(LlmCall).where(
                LlmCall.message_id == uuid.UUID(message_id)))).scalars())
            rollups = list((await s.execute(select(UserTokenUsage).where(
                UserTokenUsage.user_id == user))).scalars())
        return calls, rollups
    finally:
        await db.dispose()


async def test_a_crashed_turns_calls_are_billed_by_the_sweep(
    live_backend: str, slow_demo_llm: DemoLlm, start_gateway_process: StartGatewayProcess
) -> None:
    """The title call and the main call of a turn whose process was SIGKILLed get their
    llm_calls rows (the main one `partial`, estimated from the checkpointed text) and their
    share of the user's rollup, written by the sweep: the model was paid for them."""
    env = {**recovery_env(), "CHATGATE_TITLE_CALLS": "true"}
    first = start_gateway_process(live_backend, upstream=slow_demo_llm, env=env)
    key = await first.api_key("crash-usage")
    thread_id, seen, _ = await _crash_mid_turn(first, key, title=None)
    second = start_gateway_process(live_backend, upstream=slow_demo_llm, env=env,
                                   database_url=first.database_url)
    bound = (recovery_setting(env, "CHATGATE_PROCESS_DEAD_AFTER_S")
             + recovery_setting(env, "CHATGATE_HEARTBEAT_S") + RESTART_ALLOWANCE_S)
    async with second.client(key) as client:
        row = await _wait_swept(client, thread_id, timeout_s=bound)
    calls, rollups = await _usage_of(first.database_url, "crash-usage", str(row["id"]))
    by_stage = {call.stage: call for call in calls}
    assert sorted(by_stage) == ["main", "title"], calls
    main = by_stage["main"]
    assert (main.status, main.usage_source, main.error) == ("interrupted", "partial",
                                                            "process_died")
    # the checkpointed text's estimate: 4 bytes a token, of the text stored (or more of it)
    assert main.completion_tokens >= len(str(row["content"]).encode()) // 4 > 0
    assert main.prompt_tokens > 0 and by_stage["title"].status == "complete"
    [rollup] = [r for r in rollups if r.period_type == "day"]
    assert rollup.llm_call_count == 2
    assert rollup.total_tokens == sum(call.total_tokens for call in calls)
    meta = row["metadata"]
    assert meta["usage_source"] == "partial" and meta["tokens"] == rollup.total_tokens
    assert "checkpoint_calls" not in meta and len(seen.text) > 0


async def _checkpointed_open_call(database_url: str, timeout_s: float = 20.0) -> None:
    """Once an open call's row carries its calls so far (the checkpoint's next round)."""
    db = Database(database_url)
    try:
        for _ in range(int(timeout_s / 0.05)):
            async with db.transaction() as s:
                if (await s.execute(select(OpenCall.calls))).scalar() is not None:
                    return
            await asyncio.sleep(0.05)
        raise AssertionError("no checkpoint of the open call")
    finally:
        await db.dispose()


async def test_a_crashed_thread_less_calls_usage_is_billed_by_the_sweep(
    live_backend: str, slow_demo_llm: DemoLlm, start_gateway_process: StartGatewayProcess
) -> None:
    """A /v1 call without a thread stores no message, but its open call carries its calls
    so far as a turn's row does: SIGKILLed mid-answer, its main call is billed by the sweep
    (estimated from what streamed), and the user's stream is free again."""
    env = recovery_env()
    first = start_gateway_process(live_backend, upstream=slow_demo_llm, env=env)
    key = await first.api_key("crash-rowless")
    async with first.client(key) as client, client.stream("POST", "/v1/chat/completions", json={
            "model": "demo-1", "stream": True,
            "messages": [{"role": "user", "content": LONG}]}) as response:
        assert response.status_code == 200
        lines, read = response.aiter_lines(), 0
        while read < DELTAS_BEFORE_KILL:  # the iterator left open: leaving it would hang up
            read += (await anext(lines)).startswith("data: ")
        await _checkpointed_open_call(first.database_url)
        first.kill9()
    second = start_gateway_process(live_backend, upstream=slow_demo_llm, env=env,
                                   database_url=first.database_url)
    bound = (recovery_setting(env, "CHATGATE_PROCESS_DEAD_AFTER_S")
             + recovery_setting(env, "CHATGATE_HEARTBEAT_S") + RESTART_ALLOWANCE_S)
    db = Database(first.database_url)
    try:
        deadline = time.monotonic() + bound
        while True:
            async with db.transaction() as s:
                calls = list((await s.execute(select(LlmCall).where(
                    LlmCall.user_id == "crash-rowless"))).scalars())
                open_calls = (await s.execute(select(OpenCall))).scalars().all()
                rollups = list((await s.execute(select(UserTokenUsage).where(
                    UserTokenUsage.user_id == "crash-rowless"))).scalars())
            if calls or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.05)
    finally:
        await db.dispose()
    [main] = calls
    assert (main.stage, main.status, main.usage_source, main.error) == (
        "main", "interrupted", "partial", "process_died")
    assert main.message_id is None and main.completion_tokens > 0 and main.prompt_tokens > 0
    assert open_calls == []
    [rollup] = [r for r in rollups if r.period_type == "day"]
    assert (rollup.llm_call_count, rollup.total_tokens) == (1, main.total_tokens)
    async with second.client(key) as client:
        again = await client.post("/v1/chat/completions", json={
            "model": "demo-1", "messages": [{"role": "user", "content": "back?"}]})
        assert again.status_code == 200, again.text
