"""Two gateway processes behind PgBouncer in transaction mode (a PgBouncer of the test's
own in front of the test server), as docs/production.md configures them:
CHATGATE_DATABASE_POOLER=pgbouncer and Redis, which carries resumes and the events bus (no
LISTEN, no direct URL). A turn completes, a client that left one gateway resumes on the other, an
autonomous follow-up runs and reaches the other gateway's events stream, and a gateway
SIGKILLed mid-answer is swept by the other; no statement fails on a prepared statement."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import httpx
import pytest

from app.keys import repository as api_keys
from app.store.db import Database
from tests.e2e.helpers import new_thread, wait_for_status
from tests.support.crash import FAST_RECOVERY_ENV, read_deltas
from tests.support.databases import drop_database, make_fresh_database_url
from tests.support.gateway import DemoLlm, GatewayProcess, StartGatewayProcesses, iter_sse
from tests.support.pgbouncer import PgBouncer, running_pgbouncer
from tests.support.redis_keys import REDIS_URL
from tests.support.resume import delta_text, leave_after, resume

pytestmark = pytest.mark.postgres

LONG = "[long] tell me everything"
K = 20


@pytest.fixture
def bouncer() -> Iterator[PgBouncer]:
    with running_pgbouncer() as running:
        yield running


@pytest.fixture
def direct_url() -> Iterator[str]:
    url = make_fresh_database_url("postgresql")
    yield url
    drop_database(url)


async def _key(direct_url: str, user: str) -> str:
    """A key made on the direct connection (the test's own Database is not set for the
    pooler)."""
    db = Database(direct_url)
    try:
        async with db.transaction() as session:
            _, plaintext = await api_keys.create_key(session, user, "test")
        return plaintext
    finally:
        await db.dispose()


def _clean(gateways: list[GatewayProcess]) -> None:
    for gateway in gateways:
        text = gateway.log_text()
        assert "prepared statement" not in text, text[-3000:]
        assert "Traceback" not in text, text[-3000:]


async def _follow_up_reaches(other: httpx.AsyncClient, thread_id: str, ready: asyncio.Event
                             ) -> dict[str, object]:
    """The second answer the other gateway's events stream announces: the follow-up after
    the turn's own, stored by whichever gateway's worker claimed it. `ready` is set once
    the stream is subscribed (its `ready` event)."""
    answers = 0
    async with other.stream("GET", f"/api/threads/{thread_id}/events") as response:
        assert response.status_code == 200
        async for event in iter_sse(response):
            if event.event == "ready":
                ready.set()
            message: dict[str, object] = event.data.get("message") or {}
            if message.get("role") == "assistant":
                answers += 1
                if answers == 2:
                    return message
    raise AssertionError("the events stream ended")


async def test_two_gateways_behind_pgbouncer_turn_resume_follow_up_and_sweep(
    bouncer: PgBouncer, direct_url: str, slow_demo_llm: DemoLlm,
    start_gateway_processes: StartGatewayProcesses, redis_prefix: str,
) -> None:
    env = {**FAST_RECOVERY_ENV, "CHATGATE_DATABASE_POOLER": "pgbouncer",
           "CHATGATE_REDIS_URL": REDIS_URL,
           "CHATGATE_REDIS_PREFIX": redis_prefix, "CHATGATE_RESUME_GRACE_S": "30",
           "CHATGATE_AUTONOMY_ENABLED": "true", "CHATGATE_AUTONOMY_IDLE_SECONDS": "1",
           "CHATGATE_AUTONOMY_MAX_FOLLOWUPS": "1", "CHATGATE_FOLLOWUP_POLL_S": "0.2"}
    first, second = start_gateway_processes(
        "postgresql", 2, upstream=slow_demo_llm, env=env,
        database_url=bouncer.url_of(direct_url))
    key = await _key(direct_url, "bounced")
    async with first.client(key, timeout=60) as a, second.client(key, timeout=60) as b:
        # A turn, and its follow-up announced on the other gateway's events stream.
        thread_id = await new_thread(a, "t")
        subscribed = asyncio.Event()
        listening = asyncio.ensure_future(_follow_up_reaches(b, thread_id, subscribed))
        await asyncio.wait_for(subscribed.wait(), 30)
        async with a.stream("POST", f"/api/threads/{thread_id}/messages",
                            json={"content": "[awaiting:question] Shall we talk?"}) as response:
            ends = [event.data for event in [e async for e in iter_sse(response)]
                    if event.event == "message_end"]
        assert ends and ends[0]["status"] == "complete"
        follow_up = await asyncio.wait_for(listening, 30)
        assert follow_up["role"] == "assistant" and follow_up["status"] == "complete"

        # A client leaves the first gateway and resumes on the second.
        left = await leave_after(a, await new_thread(a, "r"), LONG, K)
        status, events, _ = await resume(b, left)
        stored = await wait_for_status(b, left.thread_id, "complete", timeout_s=30)
        assert status == 200 and events[-1].event == "message_end"
        assert left.text + delta_text(events) == stored["content"]

        # The first gateway dies mid-answer: the second sweeps its row.
        crashed = await new_thread(a, "c")
        seen = await read_deltas(a, crashed, LONG, 100)
        first.kill9()
        swept = await wait_for_status(b, crashed, "interrupted", timeout_s=30)
        assert swept["metadata"]["interrupted_reason"] == "process_died"
        assert seen.text.startswith(swept["content"])
    _clean([first, second])
    assert uuid.UUID(left.message_id)
