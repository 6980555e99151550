"""The database goes away under a running gateway: every route that needs it answers 503
`database_unavailable` with Retry-After in a normal JSON response on the same keep-alive
connection, logs one warning line per request (no traceback), and the first request after
the database is back works, without a restart. PostgreSQL goes away whole (its proxy is cut).
SQLite's outage is another process holding its write lock: what writes answers 503, while
what only reads is served (WAL readers run beside a writer), the key's lookup included."""

from __future__ import annotations

from typing import Any

import httpx

from tests.e2e.helpers import new_thread
from tests.support.gateway import DemoLlm, StartGateway, post_turn
from tests.support.outages import outage_for

RETRY_AFTER = "7"
ENV = {"CHATGATE_SQLITE_BUSY_TIMEOUT_S": "0.3", "CHATGATE_DATABASE_RETRY_AFTER_S": RETRY_AFTER,
       "CHATGATE_TITLE_CALLS": "false", "CHATGATE_FIRST_TOKEN_TIMEOUT_S": "10"}


class ConnectionCounter:
    """Counts the TCP connections httpx opens (httpcore's trace hook)."""

    def __init__(self) -> None:
        self.opened = 0

    async def __call__(self, name: str, info: dict[str, Any]) -> None:
        if name == "connection.connect_tcp.complete":
            self.opened += 1


async def _writes_while_down(client: httpx.AsyncClient, thread_id: str,
                             trace: ConnectionCounter) -> list[httpx.Response]:
    ext = {"trace": trace}
    return [
        await client.post("/api/threads", json={}, extensions=ext),
        await client.post(f"/api/threads/{thread_id}/messages", json={"content": "hi"},
                          extensions=ext),
    ]


async def _reads_while_down(client: httpx.AsyncClient, thread_id: str,
                            trace: ConnectionCounter, *, served: bool) -> list[httpx.Response]:
    """The list, and the events stream when it is refused (one served would go on)."""
    ext = {"trace": trace}
    reads = [await client.get("/api/threads", extensions=ext)]
    if not served:
        reads.append(await client.get(f"/api/threads/{thread_id}/events", extensions=ext))
    return reads


async def test_database_outage_is_a_503_with_retry_after_then_recovers(
    live_backend: str, demo_llm: DemoLlm, start_gateway: StartGateway, own_database_url: str
) -> None:
    with outage_for(live_backend, own_database_url) as outage:
        gateway = start_gateway(live_backend, upstream=demo_llm, env=ENV,
                                database_url=outage.gateway_url)
        trace = ConnectionCounter()
        async with gateway.client(await gateway.api_key("patient")) as client:
            thread_id = await new_thread(client)
            await client.get("/api/threads", extensions={"trace": trace})
            outage.start()
            down = await _writes_while_down(client, thread_id, trace)
            reads = await _reads_while_down(client, thread_id, trace,
                                            served=live_backend == "sqlite")
            logged = gateway.log_text()
            outage.end()
            back = await client.get("/api/threads", extensions={"trace": trace})
            turn = await post_turn(client, thread_id, "still there?")
    if live_backend == "sqlite":
        assert [response.status_code for response in reads] == [200]
    else:
        down += reads
    for response in down:
        assert response.status_code == 503, (response.request.url, response.text)
        assert response.headers["retry-after"] == RETRY_AFTER
        assert response.headers["content-type"] == "application/json"
        assert response.json()["error"]["code"] == "database_unavailable"
    assert trace.opened == 0  # the connection new_thread opened served every request
    assert back.status_code == 200
    assert turn.one("message_end")["status"] == "complete"
    lines = [line for line in gateway.logs() if line.get("event") == "database_unavailable"]
    assert len(lines) == len(down) and {line["level"] for line in lines} == {"warning"}
    assert "Traceback" not in logged and "unhandled_error" not in logged
