"""Resumable streams across gateway processes: two gateway processes on one PostgreSQL
database and one Redis (a key prefix of this test's own). A client that drops on the first
resumes on the second and gets the whole answer once; a Stop sent to the second ends the
turn the first runs."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from tests.e2e.helpers import HEADER, new_thread, wait_for_status
from tests.support.gateway import (
    DemoLlm,
    GatewayProcess,
    StartGatewayProcesses,
    iter_sse,
    post_turn,
    start_demo_llm,
)
from tests.support.redis_keys import REDIS_URL
from tests.support.resume import delta_ids, delta_text, leave_after, read_first, rest, resume
from tests.support.tcp_proxy import running_proxy

pytestmark = pytest.mark.postgres
LONG = "[long] tell me everything"
K = 30


@pytest.fixture(scope="module")
def brisk_demo_llm() -> Iterator[DemoLlm]:
    """2 ms a delta: a [long] answer takes a few seconds, not slow_demo_llm's nine (10 ms a
    delta), and is still running when its client leaves one gateway and resumes on the
    other, whose resume then reads it to its end."""
    demo = start_demo_llm(delay_ms=2, slow_first_s=2.0)
    yield demo
    demo.stop()


def two_gateways(start: StartGatewayProcesses, upstream: DemoLlm, prefix: str,
                 **env: str) -> list[GatewayProcess]:
    settings = {"CHATGATE_RESUME_GRACE_S": "30", "CHATGATE_REDIS_URL": REDIS_URL,
                "CHATGATE_REDIS_PREFIX": prefix,
                # two gateways start side by side on a shared 2-core machine: no spurious
                # upstream_timeout while the first token is late
                "CHATGATE_FIRST_TOKEN_TIMEOUT_S": "10", **env}
    return start("postgresql", 2, upstream=upstream, env=settings)


async def test_a_client_that_drops_on_one_gateway_resumes_on_the_other(
    brisk_demo_llm: DemoLlm, start_gateway_processes: StartGatewayProcesses, redis_prefix: str
) -> None:
    first, second = two_gateways(start_gateway_processes, brisk_demo_llm, redis_prefix)
    key = await first.api_key("roamer")
    async with first.client(key) as a, second.client(key) as b:
        left = await leave_after(a, await new_thread(a, "t"), LONG, K)
        status, events, raw = await resume(b, left)
        stored = await wait_for_status(b, left.thread_id, "complete")
    assert status == 200
    assert delta_ids(events) == list(range(K + 1, K + 1 + len(delta_ids(events))))
    assert events[-1].event == "message_end" and events[-1].data["status"] == "complete"
    assert left.text + delta_text(events) == stored["content"]
    assert not HEADER.search(raw)
    assert any(line.get("event") == "turn_resumed" and line.get("source") == "shared"
               for line in second.logs())


async def test_after_the_end_the_other_gateway_serves_the_rest_from_redis(
    slow_demo_llm: DemoLlm, start_gateway_processes: StartGatewayProcesses, redis_prefix: str
) -> None:
    first, second = two_gateways(start_gateway_processes, slow_demo_llm, redis_prefix,
                                 CHATGATE_RESUME_GRACE_S="0.3")
    key = await first.api_key("late")
    async with first.client(key) as a, second.client(key) as b:
        left = await leave_after(a, await new_thread(a, "t"), LONG, K)
        stored = await wait_for_status(b, left.thread_id, "interrupted")  # grace over
        status, events, _ = await resume(b, left)
    assert status == 200
    assert events[-1].data == {"message_id": left.message_id, "status": "interrupted"}
    assert left.text + delta_text(events) == stored["content"]


async def test_a_stop_sent_to_the_other_gateway_ends_the_turn(
    slow_demo_llm: DemoLlm, start_gateway_processes: StartGatewayProcesses, redis_prefix: str
) -> None:
    first, second = two_gateways(start_gateway_processes, slow_demo_llm, redis_prefix)
    key = await first.api_key("stopper")
    async with first.client(key) as a, second.client(key) as b:
        thread_id = await new_thread(a, "t")
        async with a.stream("POST", f"/api/threads/{thread_id}/messages",
                            json={"content": LONG}) as response:
            events = iter_sse(response)
            message_id, seen = await read_first(events, K)
            stopped = await b.post(f"/api/threads/{thread_id}/messages/{message_id}/stop")
            tail = await asyncio.wait_for(rest(events), 10)
        stored = await wait_for_status(b, thread_id, "interrupted")
    assert stopped.status_code == 202
    assert stopped.json() == {"message_id": message_id, "status": "streaming"}
    assert tail[-1].event == "message_end" and tail[-1].data["status"] == "interrupted"
    assert delta_text(seen) + delta_text(tail) == stored["content"]
    assert any(line.get("event") == "turn_stopped" and line.get("reason") == "stop_request"
               for line in first.logs())


async def test_the_first_turn_after_redis_returns_resumes_on_the_other_gateway(
    brisk_demo_llm: DemoLlm, start_gateway_processes: StartGatewayProcesses, redis_prefix: str
) -> None:
    """Redis (through a proxy the test owns) goes away while both gateways run, long enough
    for their stop listeners to fail; once it is back, the next turn is mirrored, though its
    first write meets the connection an earlier turn left in the pool, dead since."""
    host, port = REDIS_URL.split("//", 1)[1].split("/", 1)[0].rsplit(":", 1)
    with running_proxy(host, int(port)) as proxy:
        url = f"redis://127.0.0.1:{proxy.port}/{REDIS_URL.rsplit('/', 1)[1]}"
        first, second = two_gateways(start_gateway_processes, brisk_demo_llm, redis_prefix,
                                     CHATGATE_REDIS_URL=url)
        key = await first.api_key("returning")
        async with first.client(key) as a, second.client(key) as b:
            thread_id = await new_thread(a, "t")
            await post_turn(a, thread_id, "hello")  # its mirror leaves a pooled connection
            proxy.cut()
            await until_logged([first, second], "turn_share_failed")
            proxy.restore()
            left = await leave_after(a, thread_id, LONG, K)
            status, events, body = await resume(b, left)
            stored = await wait_for_status(b, left.thread_id, "complete")
    assert status == 200, body
    assert events[-1].event == "message_end" and events[-1].data["status"] == "complete"
    assert left.text + delta_text(events) == stored["content"]


async def until_logged(gateways: list[GatewayProcess], event: str) -> None:
    """Until each gateway has logged `event` (a bounded count of short polls)."""
    for _ in range(300):
        if all(any(line.get("event") == event for line in g.logs()) for g in gateways):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{event} not logged by every gateway")
