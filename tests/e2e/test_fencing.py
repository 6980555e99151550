"""One answer per thread when a process is cut off from PostgreSQL: two real gateway
processes on one database, one of them behind a TCP proxy of the test's own that goes
silent (no FIN, no RST: a partition).

- The owner partitioned: its client is told the answer ended (`interrupted`,
  `database_unreachable`) before the other process may take the thread over, no delta
  reaches it after that, and once the network is back the owner's late finish leaves the
  swept row as the sweep wrote it.
- The same for an OpenAI-style call stored in a thread (`/v1/chat/completions` with
  `X-Chatgate-Thread-Id`): the fence ends every answer of the process, whatever API runs
  it, and the SDK raises the API's own error (`database_unreachable`).
- The sweeper partitioned: its heartbeat and sweep stop and come back late; the answer the
  other process streams meanwhile is never taken over, and the thread takes a new turn
  only once that answer is complete.

Short settings instead of long waits: a heartbeat every 0.25 s, the fence after 2.5 s, dead
after 3.5 s (app.config.fencing). The fence is not the derived half of dead-after: a loaded
machine stalls a heartbeat round (a beat and a sweep) past 1.5 s often enough to fence a
healthy process, and end the answer a test watches.

The two processes stop before the proxy closes and the database is dropped: a process
whose database went away first would spend its shutdown retrying what it has to store."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from sqlalchemy import select
from sqlalchemy.engine import make_url

from app.store.db import Database
from app.store.models import Message
from tests.e2e.helpers import new_thread
from tests.support.databases import drop_database, make_fresh_database_url, require_postgres
from tests.support.gateway import DemoLlm, GatewayPool, GatewayProcess, iter_sse
from tests.support.tcp_proxy import TcpProxy, running_proxy

pytestmark = pytest.mark.postgres

LONG = "[long] tell me everything"
DEAD_AFTER_S = 3.5
ENV = {"CHATGATE_HEARTBEAT_S": "0.25", "CHATGATE_PROCESS_FENCE_AFTER_S": "2.5",
       "CHATGATE_PROCESS_DEAD_AFTER_S": str(DEAD_AFTER_S),
       "CHATGATE_DATABASE_CONNECT_TIMEOUT_S": "1", "CHATGATE_DATABASE_STATEMENT_TIMEOUT_S": "1",
       "CHATGATE_DATABASE_POOL_TIMEOUT_S": "2", "CHATGATE_TITLE_CALLS": "false",
       "CHATGATE_FIRST_TOKEN_TIMEOUT_S": "10", "CHATGATE_RESUME_GRACE_S": "0"}
#: How long a test waits for what must happen within seconds.
GIVE_UP_S = 30.0


@dataclass
class Partition:
    """Two gateway processes of these tests on one database, the owner's answer's and the
    sweeper's, one of them through the proxy; `direct` is the database's own URL."""

    owner: GatewayProcess
    sweeper: GatewayProcess
    proxy: TcpProxy
    direct: str


@contextlib.contextmanager
def partition(log_dir: Path, demo: DemoLlm, *, behind_proxy: str) -> Iterator[Partition]:
    """A fresh database, a proxy of the test's in front of it, and the two processes,
    started side by side, `behind_proxy` ("owner" or "sweeper") reaching it through the
    proxy; the processes are stopped first, the proxy closed, the database dropped last."""
    require_postgres()
    url = make_fresh_database_url("postgresql")
    parsed = make_url(url)
    try:
        with running_proxy(parsed.host or "127.0.0.1", parsed.port or 5432) as proxy, \
                GatewayPool(log_dir) as pool:
            proxied = parsed.set(port=proxy.port).render_as_string(hide_password=False)
            urls = [proxied, url] if behind_proxy == "owner" else [url, proxied]
            owner, sweeper = pool.start_processes_on("postgresql", urls, upstream=demo,
                                                     env=ENV)
            yield Partition(owner, sweeper, proxy, url)
    finally:
        with contextlib.suppress(Exception):
            drop_database(url)


async def _row(url: str, message_id: str) -> Message:
    db = Database(url)
    try:
        async with db.transaction() as session:
            row = (await session.execute(
                select(Message).where(Message.id == uuid.UUID(message_id)))).scalar_one()
            session.expunge(row)
            return row
    finally:
        await db.dispose()


async def _second_turn(client: httpx.AsyncClient, thread_id: str) -> tuple[float, str]:
    """A second turn asked for every 0.2 s until the thread takes it (409 `thread_busy`
    before); when it was accepted (monotonic) and how its answer ended."""
    async with asyncio.timeout(GIVE_UP_S):
        while True:
            async with client.stream("POST", f"/api/threads/{thread_id}/messages",
                                     json={"content": "my turn now?"}) as response:
                if response.status_code == 409:
                    await response.aread()
                    await asyncio.sleep(0.2)
                    continue
                assert response.status_code == 200, await response.aread()
                accepted = time.monotonic()
                ends = [event.data["status"] async for event in iter_sse(response)
                        if event.event == "message_end"]
                return accepted, ends[-1]


async def _logged(gateway: GatewayProcess, event: str) -> dict[str, Any]:
    async with asyncio.timeout(GIVE_UP_S):
        while True:
            for line in gateway.logs():
                if line.get("event") == event:
                    return line
            await asyncio.sleep(0.1)


async def test_a_partitioned_owner_ends_its_answer_before_another_process_takes_over(
    slow_demo_llm: DemoLlm, live_log_dir: Path
) -> None:
    with partition(live_log_dir, slow_demo_llm, behind_proxy="owner") as cut:
        owner, sweeper, proxy = cut.owner, cut.sweeper, cut.proxy
        key = await sweeper.api_key("fenced")
        deltas: list[tuple[float, str]] = []
        end: tuple[float, dict[str, Any]] | None = None
        async with owner.client(key, timeout=60) as a, sweeper.client(key, timeout=60) as b:
            thread_id = await new_thread(a)
            second: asyncio.Task[tuple[float, str]] | None = None
            async with asyncio.timeout(GIVE_UP_S), a.stream(
                    "POST", f"/api/threads/{thread_id}/messages",
                    json={"content": LONG}) as response:
                async for event in iter_sse(response):
                    if event.event == "message_start":
                        message_id = event.data["assistant_message_id"]
                    elif event.event == "delta":
                        deltas.append((time.monotonic(), event.data["text"]))
                        if second is None:
                            proxy.silence()
                            partitioned = time.monotonic()
                            second = asyncio.create_task(_second_turn(b, thread_id))
                    elif event.event == "message_end":
                        end = (time.monotonic(), event.data)
            assert second is not None
            accepted, second_status = await second
            proxy.speak()
            await _logged(owner, "turn_store_skipped")  # its late finish met the fence
        row = await _row(cut.direct, message_id)
    assert end is not None, "the owner's client was never told the answer ended"
    ended_at, data = end
    print(f"owner told at +{ended_at - partitioned:.2f} s, "
          f"thread taken over at +{accepted - partitioned:.2f} s")
    assert data == {"message_id": message_id, "status": "interrupted",
                    "reason": "database_unreachable"}
    assert ended_at < accepted
    assert all(at <= ended_at for at, _ in deltas)
    assert second_status == "complete"
    # The sweep's row stands: the owner's late finish did not overwrite it.
    assert row.status == "interrupted" and row.meta["interrupted_reason"] == "process_died"
    assert "".join(text for _, text in deltas).startswith(row.content)


async def test_a_partitioned_owner_ends_a_v1_call_in_a_thread_before_another_takes_over(
    slow_demo_llm: DemoLlm, live_log_dir: Path
) -> None:
    with partition(live_log_dir, slow_demo_llm, behind_proxy="owner") as cut:
        owner, sweeper, proxy = cut.owner, cut.sweeper, cut.proxy
        key = await sweeper.api_key("fenced-v1")
        deltas: list[tuple[float, str]] = []
        told: tuple[float, openai.APIError] | None = None
        async with owner.client(key, timeout=60) as a, sweeper.client(key, timeout=60) as b, \
                openai.AsyncOpenAI(base_url=owner.url + "/v1", api_key=key, max_retries=0,
                                   timeout=60) as sdk:
            thread_id = await new_thread(a)
            second: asyncio.Task[tuple[float, str]] | None = None
            stream: Any = await sdk.chat.completions.create(
                model="demo-1", stream=True, messages=[{"role": "user", "content": LONG}],
                extra_headers={"X-Chatgate-Thread-Id": thread_id})
            try:
                async with asyncio.timeout(GIVE_UP_S):
                    async for chunk in stream:
                        if chunk.choices and chunk.choices[0].delta.content:
                            deltas.append((time.monotonic(), chunk.choices[0].delta.content))
                            if second is None:
                                proxy.silence()
                                partitioned = time.monotonic()
                                second = asyncio.create_task(_second_turn(b, thread_id))
            except openai.APIError as exc:
                told = (time.monotonic(), exc)
            assert second is not None
            accepted, second_status = await second
            proxy.speak()
            await _logged(owner, "turn_store_skipped")  # its late finish met the fence
            stored = (await b.get(f"/api/threads/{thread_id}/messages")).json()["messages"]
    assert told is not None, "the owner's client was never told the call ended"
    told_at, error = told
    print(f"owner's /v1 client told at +{told_at - partitioned:.2f} s, "
          f"thread taken over at +{accepted - partitioned:.2f} s")
    assert error.code == "database_unreachable"  # type: ignore[attr-defined]
    assert told_at < accepted
    assert all(at <= told_at for at, _ in deltas)
    assert second_status == "complete"
    first, *_ = [m for m in stored if m["role"] == "assistant"]
    assert first["status"] == "interrupted"
    assert first["metadata"]["interrupted_reason"] == "process_died"
    assert "".join(text for _, text in deltas).startswith(first["content"])


async def test_a_partitioned_sweeper_never_takes_over_a_live_answer(
    slow_demo_llm: DemoLlm, live_log_dir: Path
) -> None:
    with partition(live_log_dir, slow_demo_llm, behind_proxy="sweeper") as cut:
        owner, sweeper, proxy = cut.owner, cut.sweeper, cut.proxy
        key = await owner.api_key("steady")
        text, ends, healed = "", [], False
        async with owner.client(key, timeout=60) as a, sweeper.client(key, timeout=60) as b:
            thread_id = await new_thread(a)
            second: asyncio.Task[tuple[float, str]] | None = None
            async with asyncio.timeout(GIVE_UP_S), a.stream(
                    "POST", f"/api/threads/{thread_id}/messages",
                    json={"content": LONG}) as response:
                async for event in iter_sse(response):
                    if event.event == "delta":
                        if not text:
                            proxy.silence()
                            silenced = time.monotonic()
                        elif not healed and time.monotonic() > silenced + 2 * DEAD_AFTER_S:
                            proxy.speak()  # held beats and sweeps arrive, late
                            healed = True
                            second = asyncio.create_task(_second_turn(b, thread_id))
                        text += event.data["text"]
                    elif event.event == "message_end":
                        ends.append(event.data["status"])
            assert second is not None, "the answer ended before the sweeper came back"
            await second
            stored = (await a.get(f"/api/threads/{thread_id}/messages")).json()["messages"]
        assert [m["role"] for m in stored] == ["user", "assistant"] * 2
        answer_id, question_id = stored[1]["id"], stored[2]["id"]
        answer, question = await _row(cut.direct, answer_id), await _row(cut.direct, question_id)
    assert ends == ["complete"]
    # The server's order, not the order two connections' packets reached this client in.
    assert answer.completed_at is not None and question.created_at >= answer.completed_at
    assert answer.status == "complete" and answer.content == text
