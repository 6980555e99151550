"""A silent network partition between the gateway and PostgreSQL: the sockets stay open and
new ones are accepted, but nothing goes through, no FIN and no RST. Every route that needs
the database answers 503 within the configured bound instead of hanging, and the gateway
works again as soon as the network does, without a restart.

PostgreSQL only: SQLite is a local file, with no network to lose (its one wait, for another
writer, is tests/e2e/test_database_down.py's outage)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Iterator

import httpx
import pytest
from sqlalchemy.engine import make_url

from tests.e2e.helpers import new_thread, wait_for_status
from tests.support.databases import drop_database, make_fresh_database_url, require_postgres
from tests.support.gateway import DemoLlm, StartGateway, iter_sse, post_turn
from tests.support.tcp_proxy import TcpProxy, running_proxy

pytestmark = pytest.mark.postgres

#: The gateway's connect and statement timeouts in this test, and its pool's checkout timeout.
BOUND_S = 1.0
#: What an answer may take beyond the bound: the timed-out connection is closed and a
#: response written; on a loaded machine shared with other test runs, scheduling adds
#: seconds. Still far below GIVE_UP_S, the hang this test tells apart.
MARGIN_S = 4.0
#: A request unanswered this long under the partition hangs (before the bounds: forever).
GIVE_UP_S = 20.0
RETRY_AFTER = "7"
#: The default fence: half of the default dead-after (10 s).
FENCE_AFTER_S = 5.0
ENV = {"CHATGATE_DATABASE_CONNECT_TIMEOUT_S": str(BOUND_S),
       "CHATGATE_DATABASE_STATEMENT_TIMEOUT_S": str(BOUND_S),
       "CHATGATE_DATABASE_POOL_TIMEOUT_S": str(2 * BOUND_S),
       "CHATGATE_DATABASE_RETRY_AFTER_S": RETRY_AFTER,
       "CHATGATE_TITLE_CALLS": "false", "CHATGATE_FIRST_TOKEN_TIMEOUT_S": "10"}


@contextlib.contextmanager
def proxied_postgres() -> Iterator[tuple[str, TcpProxy]]:
    """A fresh database of this test's, and a proxy of the test's in front of it: the URL the
    gateway gets goes through the proxy."""
    require_postgres()
    url = make_fresh_database_url("postgresql")
    parsed = make_url(url)
    try:
        with running_proxy(parsed.host or "127.0.0.1", parsed.port or 5432) as proxy:
            yield parsed.set(port=proxy.port).render_as_string(hide_password=False), proxy
    finally:
        with contextlib.suppress(Exception):
            drop_database(url)


async def timed(request: Callable[[], Awaitable[httpx.Response]]
                ) -> tuple[httpx.Response, float]:
    """The response and how long it took (the clock only measures). A request still
    unanswered after GIVE_UP_S fails the test rather than hang it (the in-process client has
    no network timeout of its own)."""
    started = time.monotonic()
    try:
        async with asyncio.timeout(GIVE_UP_S):
            response = await request()
    except TimeoutError:
        pytest.fail(f"no answer in {GIVE_UP_S} s under a silent partition")
    return response, time.monotonic() - started


async def test_a_silent_partition_is_a_503_within_the_bound_then_recovers(
    demo_llm: DemoLlm, start_gateway: StartGateway
) -> None:
    with proxied_postgres() as (gateway_url, proxy):
        gateway = start_gateway("postgresql", upstream=demo_llm, env=ENV,
                                database_url=gateway_url)
        async with gateway.client(await gateway.api_key("partitioned"), timeout=60) as client:
            thread_id = await new_thread(client)
            assert (await client.get("/api/threads")).status_code == 200
            proxy.silence()
            ready, ready_s = await timed(lambda: client.get("/readyz"))
            listed, listed_s = await timed(lambda: client.get("/api/threads"))
            posted, posted_s = await timed(lambda: client.post(
                f"/api/threads/{thread_id}/messages", json={"content": "anyone there?"}))
            proxy.speak()
            back = await client.get("/api/threads")
            turn = await post_turn(client, thread_id, "and now?")
            ready_again = await client.get("/readyz")
    print(f"time to 503 under a silent partition (bound {BOUND_S} s): /readyz {ready_s:.2f} s,"
          f" GET /api/threads {listed_s:.2f} s, POST a turn {posted_s:.2f} s")
    # /readyz names its reason in its own words (docs/api.md): the database is unreachable.
    assert ready.status_code == 503, ready.text
    assert ready.json()["error"]["code"] == "database_unreachable"
    for response in (listed, posted):
        assert response.status_code == 503, (response.request.url, response.text)
        assert response.json()["error"]["code"] == "database_unavailable"
        assert response.headers["retry-after"] == RETRY_AFTER
    for took in (ready_s, listed_s, posted_s):
        assert took < BOUND_S + MARGIN_S, (ready_s, listed_s, posted_s)
    assert back.status_code == 200 and [t["id"] for t in back.json()["threads"]] == [thread_id]
    assert turn.one("message_end")["status"] == "complete"
    assert ready_again.status_code == 200


async def test_a_stream_caught_by_a_silent_partition_ends_itself_and_stores_what_was_seen(
    slow_demo_llm: DemoLlm, start_gateway: StartGateway
) -> None:
    """The answer streams on (the model is not behind the partition) until the process,
    unable to renew its heartbeat, fences itself (app.config.fencing: before any other process may
    take the thread over): the client is told `interrupted` (`database_unreachable`) within
    the fence bound, and once the network is back the row stores exactly the text the
    client saw."""
    with proxied_postgres() as (gateway_url, proxy):
        gateway = start_gateway("postgresql", upstream=slow_demo_llm, env=ENV,
                                database_url=gateway_url)
        # Over HTTP: the in-memory transport hands over a response only once it is complete.
        async with gateway.client(await gateway.api_key("streaming"), timeout=60,
                                  over_http=True) as client:
            thread_id = await new_thread(client)
            seen: list[str] = []
            end: dict[str, object] = {}
            async with asyncio.timeout(GIVE_UP_S * 3), client.stream(
                    "POST", f"/api/threads/{thread_id}/messages",
                    json={"content": "[long] please write a lot"}) as response:
                async for event in iter_sse(response):
                    if event.event == "delta":
                        if not seen:
                            proxy.silence()
                            started = time.monotonic()
                        seen.append(event.data["text"])
                    elif event.event == "message_end":
                        end = event.data
            took = time.monotonic() - started
            proxy.speak()
            stored = await wait_for_status(client, thread_id, "interrupted", timeout_s=30)
    print(f"a stream under a silent partition ended itself after {took:.1f} s")
    assert end["status"] == "interrupted" and end["reason"] == "database_unreachable"
    assert took < FENCE_AFTER_S + MARGIN_S
    assert stored["metadata"]["interrupted_reason"] == "database_unreachable"
    assert stored["content"] == "".join(seen) and len(seen) > 10
