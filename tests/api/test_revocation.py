"""A revoked API key's open SSE streams (a turn and a thread's events) end within the
revocation check interval, the turn stored `interrupted` with exactly the text its client
got; the key is refused afterwards.
The interval is a setting (0.1 s here): no real-clock deadline of seconds is waited on."""

from __future__ import annotations

import asyncio
import time
import uuid

import httpx

from app.config.settings import Settings
from app.keys import repository as api_keys
from app.store.db import Database
from app.threads import repository as threads_store
from tests.support.gateway import DemoLlm, SseEvent, iter_sse, serve_gateway

CHECK_S = 0.1
#: The promise to operators: streams of a revoked key end within 5 s (default check: 2 s).
PROMISED_S = 5.0


def _settings(database_url: str, upstream: DemoLlm) -> Settings:
    return Settings(database_url=database_url, upstream_base_url=upstream.base_url,
                    auth_mode="keys", revocation_check_s=CHECK_S, title_calls=False,
                    summary_calls=False, keepalive_s=1.0, log_level="WARNING")


async def _read_until(response: httpx.Response, first: str, seen: list[SseEvent],
                      reached: asyncio.Event) -> None:
    async for event in iter_sse(response):
        seen.append(event)
        if event.event == first:
            reached.set()


async def _open_stream(client: httpx.AsyncClient, method: str, path: str, first: str,
                       **kwargs: object) -> tuple[list[SseEvent], asyncio.Task[None]]:
    """A stream read in the background; returns once its `first` event arrived."""
    seen: list[SseEvent] = []
    reached = asyncio.Event()

    async def run() -> None:
        async with client.stream(method, path, **kwargs) as response:  # type: ignore[arg-type]
            assert response.status_code == 200
            await _read_until(response, first, seen, reached)

    task = asyncio.create_task(run())
    await asyncio.wait_for(reached.wait(), 10)
    return seen, task


async def test_revoking_a_key_ends_its_open_streams(
    database_url: str, slow_demo_llm: DemoLlm
) -> None:
    db = Database(database_url)
    async with db.transaction() as s:
        key, plaintext = await api_keys.create_key(s, "mallory", "stolen")
    headers = {"Authorization": f"Bearer {plaintext}"}
    async with serve_gateway(_settings(database_url, slow_demo_llm)) as url, \
            httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as client:
        thread_id = (await client.post("/api/threads", json={"title": "t"})).json()["id"]
        events, events_task = await _open_stream(
            client, "GET", f"/api/threads/{thread_id}/events", "ready")
        turn, turn_task = await _open_stream(
            client, "POST", f"/api/threads/{thread_id}/messages", "delta",
            json={"content": "[long] go on"})
        async with db.transaction() as s:
            assert await api_keys.revoke_key(s, key.id)
        revoked_at = time.monotonic()
        await asyncio.wait_for(asyncio.gather(events_task, turn_task), PROMISED_S)
        ended_s = time.monotonic() - revoked_at
        refused = await client.get("/api/threads")
    assert ended_s < PROMISED_S
    assert events[-1] == SseEvent("error", {"code": "key_revoked",
                                            "message": "the API key was revoked"}, None)
    assert turn[-1].data["code"] == "key_revoked"
    # The turn was stopped at once, and its end sent before the revocation's error.
    assert (turn[-2].event, turn[-2].data["status"]) == ("message_end", "interrupted")
    assert refused.status_code == 401
    async with db.transaction() as s:
        row = await threads_store.get_message(
            s, "mallory", uuid.UUID(turn[0].data["assistant_message_id"]))
    await db.dispose()
    assert row is not None and row.status == "interrupted"
    assert row.meta["interrupted_reason"] == "key_revoked"
    sent = "".join(e.data["text"] for e in turn if e.event == "delta")
    assert row.content == sent and len(sent) < 2000  # far from the whole [long] answer
