"""Liveness, readiness, auth mode off, and refusing to start on a bad database."""

from __future__ import annotations

import subprocess
import sys

import httpx

from tests.e2e.helpers import messages, new_thread
from tests.support.databases import drop_database, make_fresh_database_url
from tests.support.live import ROOT, DemoLlm, LiveGateway, StartGateway, _clean_env, post_turn


async def test_healthz_and_readyz(gateway: LiveGateway) -> None:
    async with httpx.AsyncClient(base_url=gateway.url) as client:
        health = await client.get("/healthz")
        ready = await client.get("/readyz")
    assert (health.status_code, health.json()) == (200, {"status": "ok"})
    assert (ready.status_code, ready.json()) == (200, {"status": "ready"})
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


def test_gateway_refuses_to_start_on_an_unmigrated_database(live_backend: str) -> None:
    url = make_fresh_database_url(live_backend, migrated=False)
    try:
        env = _clean_env({"CHATGATE_DATABASE_URL": url})
        done = subprocess.run(
            [sys.executable, "-c",
             "import uvicorn; uvicorn.run('app.main:create_app', factory=True, "
             "host='127.0.0.1', port=0)"],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
        )
    finally:
        drop_database(url)
    assert done.returncode != 0
    assert "synthetic_roundtrip_failed" in done.stdout + done.stderr or \
        "Application startup failed" in done.stdout + done.stderr
