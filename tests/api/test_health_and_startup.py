"""Liveness, readiness, auth mode off, and refusing to start on a bad database."""

from __future__ import annotations

import contextlib
import json
import re
from typing import Any

import httpx
from sqlalchemy import text

from app.store.db import Database
from tests.e2e.helpers import messages, new_thread
from tests.support.databases import (
    drop_database,
    make_fresh_database_url,
    metadata_key_dropping_trigger,
)
from tests.support.gateway import (
    DemoLlm,
    LiveGateway,
    ServerFailed,
    StartGateway,
    post_turn,
    start_in_process_gateway,
)


async def test_healthz_and_readyz(gateway: LiveGateway) -> None:
    async with httpx.AsyncClient(base_url=gateway.url) as client:
        health = await client.get("/healthz")
        ready = await client.get("/readyz")
    assert (health.status_code, health.json()) == (200, {"status": "ok"})
    assert (ready.status_code, ready.json()["status"]) == (200, "ready")
    assert health.headers["x-request-id"]


async def test_auth_off_makes_everyone_user_local(
    live_backend: str, demo_llm: DemoLlm, start_gateway: StartGateway
) -> None:
    gateway = start_gateway(live_backend, upstream=demo_llm, env={"CHATGATE_AUTH_MODE": "off"})
    async with gateway.client() as client:
        thread_id = await new_thread(client)
        result = await post_turn(client, thread_id, "hi")
        assert result.one("message_end")["status"] == "complete"
        assert len(await messages(client, thread_id)) == 2
    assert any(line.get("user_id") == "local" for line in gateway.logs())


def start_gateway_until_it_exits(database_url: str, upstream: DemoLlm) -> tuple[int, str]:
    """Start the gateway under uvicorn (in process) on database_url, expecting it to refuse:
    the exit code uvicorn gives a failed start-up, and everything the gateway logged."""
    try:
        gateway = start_in_process_gateway(
            database_url, {"CHATGATE_UPSTREAM_BASE_URL": upstream.base_url})
    except ServerFailed as refused:
        return (refused.exit_code if refused.exit_code is not None else -1), refused.log
    gateway.stop()
    return 0, gateway.log_text()


def log_events(output: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for line in output.splitlines():
        with contextlib.suppress(ValueError):
            item = json.loads(line)
            if isinstance(item, dict) and "event" in item:
                events.append(item)
    return events


def test_gateway_refuses_to_start_on_an_unmigrated_database(
    live_backend: str, demo_llm: DemoLlm
) -> None:
    url = make_fresh_database_url(live_backend, migrated=False)
    try:
        code, output = start_gateway_until_it_exits(url, demo_llm)
    finally:
        drop_database(url)
    assert code != 0, output
    assert "Application startup failed" in output
    # the first table the start-up check writes is missing (JSON logs escape the quotes)
    assert re.search(r'no such table: threads|relation \\?"threads\\?" does not exist', output)
    assert "gateway_started" not in output


async def test_gateway_refuses_to_start_when_the_database_alters_synthetic_metadata(
    live_backend: str, demo_llm: DemoLlm
) -> None:
    url = make_fresh_database_url(live_backend)  # migrated: only the trigger is wrong
    try:
        db = Database(url)
        try:
            async with db.transaction() as session:
                for statement in metadata_key_dropping_trigger(live_backend, "trigger_reason"):
                    await session.execute(text(statement))
        finally:
            await db.dispose()
        code, output = start_gateway_until_it_exits(url, demo_llm)
    finally:
        drop_database(url)
    assert code != 0, output
    events = log_events(output)
    [failed] = [e for e in events if e["event"] == "synthetic_roundtrip_failed"]
    assert failed["level"] == "error" and failed["backend"] == live_backend
    assert failed["problems"] == ["metadata.trigger_reason is None"], failed
    assert "gateway_started" not in [e["event"] for e in events]
