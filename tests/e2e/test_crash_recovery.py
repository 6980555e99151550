"""A gateway SIGKILLed mid-stream: its row is swept `interrupted` (reason `process_died`)
within seconds by the restarted process, with the text the client had seen up to one
checkpoint interval, and the thread takes a new turn (no 409)."""

from __future__ import annotations

import asyncio
import time

import httpx

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


async def _crash_mid_turn(gateway: GatewayProcess, key: str) -> tuple[str, SeenDeltas, float]:
    async with gateway.client(key) as client:
        thread_id = await new_thread(client, "crash")
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
