"""/readyz is what a load balancer rotates on: 200 only while the database answers and is at
alembic head; 503 with the reason otherwise, and back to 200 once fixed, without a restart.
/healthz (liveness) stays 200 throughout, so an orchestrator does not kill a healthy process."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from alembic import command
from sqlalchemy.engine import make_url

from app.store.migrations import alembic_config
from tests.support.databases import PG_ADMIN_URL, require_postgres
from tests.support.gateway import DemoLlm, LiveGateway, StartGateway, free_port
from tests.support.http import LOOPBACK_TLS

NOT_READY_WAIT_S = 10.0


def get(gateway: LiveGateway, path: str) -> httpx.Response:
    return httpx.get(gateway.url + path, timeout=10.0, verify=LOOPBACK_TLS)


def wait_for_readyz(gateway: LiveGateway, status_code: int) -> httpx.Response:
    """/readyz once it answers `status_code` (PostgreSQL may need one failed pre-ping first)."""
    deadline = time.monotonic() + NOT_READY_WAIT_S
    response = get(gateway, "/readyz")
    while response.status_code != status_code and time.monotonic() < deadline:
        time.sleep(0.1)
        response = get(gateway, "/readyz")
    return response


def assert_not_ready(response: httpx.Response, code: str) -> None:
    assert response.status_code == 503, response.text
    body: dict[str, Any] = response.json()
    assert body["status"] == "not_ready"
    assert body["error"]["code"] == code
    assert body["error"]["message"]


def test_readyz_follows_the_schema_revision_of_a_live_database(
    live_backend: str, demo_llm: DemoLlm, start_gateway: StartGateway
) -> None:
    gateway = start_gateway(live_backend, upstream=demo_llm)
    ready = get(gateway, "/readyz")
    assert (ready.status_code, ready.json()["status"]) == (200, "ready")

    config = alembic_config(gateway.database_url)
    command.downgrade(config, "-1")  # an operator rolled the schema back under the gateway
    assert_not_ready(get(gateway, "/readyz"), "database_not_migrated")
    assert get(gateway, "/healthz").status_code == 200

    command.upgrade(config, "head")
    ready = get(gateway, "/readyz")
    assert (ready.status_code, ready.json()["status"]) == (200, "ready")


async def _set_allow_connections(database: str, allowed: bool) -> None:
    """Open or close a PostgreSQL database to new connections; closing also ends the
    connections it has (the gateway's pool), so the gateway sees an unreachable database."""
    admin = await asyncpg.connect(PG_ADMIN_URL, timeout=5)
    try:
        await admin.execute(
            f'ALTER DATABASE "{database}" WITH ALLOW_CONNECTIONS {str(allowed).lower()}')
        if not allowed:
            await admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = $1 AND pid <> pg_backend_pid()", database)
    finally:
        await admin.close()


@pytest.mark.postgres
def test_readyz_503_while_postgresql_refuses_connections(
    demo_llm: DemoLlm, start_gateway: StartGateway
) -> None:
    require_postgres()
    gateway = start_gateway("postgresql", upstream=demo_llm)
    database = make_url(gateway.database_url).database
    assert database
    assert get(gateway, "/readyz").status_code == 200

    asyncio.run(_set_allow_connections(database, False))
    try:
        assert_not_ready(wait_for_readyz(gateway, 503), "database_unreachable")
        assert get(gateway, "/healthz").status_code == 200
    finally:
        asyncio.run(_set_allow_connections(database, True))

    ready = wait_for_readyz(gateway, 200)
    assert (ready.status_code, ready.json()["status"]) == (200, "ready")


def test_readyz_reports_a_model_server_it_cannot_reach_as_unreachable(
    demo_llm: DemoLlm, start_gateway: StartGateway, tmp_path: Path
) -> None:
    """A models file whose server is not there: /readyz says so before any turn fails on it
    (it said `healthy`, as no request had failed yet); the process stays in rotation."""
    closed = free_port()  # nothing listens there
    path = tmp_path / "models.toml"
    path.write_text(f'[servers.up]\nbase_url = "{demo_llm.base_url}"\n\n'
                    f'[servers.down]\nbase_url = "http://127.0.0.1:{closed}/v1"\n\n'
                    '[[models]]\nname = "one"\nserver = "up"\n\n'
                    '[[models]]\nname = "two"\nserver = "down"\n')
    gateway = start_gateway("sqlite", env={"CHATGATE_MODELS_FILE": str(path)})
    ready = get(gateway, "/readyz")
    assert (ready.status_code, ready.json()["status"]) == (200, "ready")
    states = {s["server"]: s["state"] for s in ready.json()["model_servers"]}
    assert states == {"up": "healthy", "down": "unreachable"}
