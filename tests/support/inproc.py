"""The gateway in the test's own process: `create_app(Settings(...))` with its lifespan, spoken
to through httpx.ASGITransport. For tests where a subprocess proves nothing more; the upstream
is still a real demo model server (tests/support/live.py `demo_llm`).

    async with in_process_gateway(database_url, demo_llm, max_streams_per_user=2) as gw:
        async with gw.client(await gw.api_key("alice")) as client: ...
        turn = await gw.hold_turn("alice", thread_id)   # a turn opened through the limits,
        await turn.finish()                              # holding its stream until finished

ASGITransport hands a response over only once it is complete, so a stream that must stay
open while the test sends other requests is opened at the service level (`hold_turn`): the
same gate, rows and upstream slot as the endpoint's, without the socket."""

from __future__ import annotations

import datetime as dt
import socket
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample
from starlette.applications import Starlette

from app.main import create_app
from app.services.api_keys import Principal
from app.services.runtime import Runtime
from app.services.turn import Turn
from app.settings import Settings
from app.store import api_keys
from tests.support.live import DemoLlm


def free_tcp_port() -> int:
    """A port nothing listens on (for a server that is out of reach)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class FakeClock:
    """A clock the test moves by hand (the limits decide windows and days by it)."""

    def __init__(self, now: dt.datetime) -> None:
        self.now = now

    def __call__(self) -> dt.datetime:
        return self.now


@dataclass
class InProcessGateway:
    app: Starlette

    @property
    def runtime(self) -> Runtime:
        rt: Runtime = self.app.state.runtime
        return rt

    def client(self, api_key: str | None = None) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        return httpx.AsyncClient(transport=httpx.ASGITransport(app=self.app),
                                 base_url="http://gateway.test", headers=headers, timeout=30)

    async def api_key(self, user: str, *, tokens: int | None = None,
                      cost_usd: float | None = None) -> str:
        """A new key for `user`, with a daily budget when given."""
        async with self.runtime.db.transaction() as session:
            row, plaintext = await api_keys.create_key(session, user, "test")
            if tokens is not None or cost_usd is not None:
                await api_keys.set_budget(session, row.id, tokens=tokens, cost_usd=cost_usd)
        return plaintext

    async def hold_turn(self, user: str, thread_id: str) -> Turn:
        """A turn opened through the gate and left unstreamed: its row is `streaming` and it
        holds an upstream slot until `finish()`."""
        return await self.runtime.gate.open(Principal(user, False), uuid.UUID(thread_id), "hi")

    async def samples(self, name: str) -> list[Sample]:
        """The samples named `name`, as GET /metrics shows them."""
        async with self.client() as client:
            text = (await client.get("/metrics")).text
        return [s for f in text_string_to_metric_families(text) for s in f.samples
                if s.name == name]

    async def gauge(self, name: str) -> float:
        """A gauge without labels (0 when absent)."""
        return next((s.value for s in await self.samples(name)), 0.0)

    async def refusals(self) -> dict[str, float]:
        """chatgate_refusals_total by reason."""
        return {s.labels["reason"]: s.value
                for s in await self.samples("chatgate_refusals_total")}


def gateway_settings(database_url: str, upstream: DemoLlm, **overrides: Any) -> Settings:
    """Keys auth, short upstream timeouts, no `.env`: only what the test says."""
    values: dict[str, Any] = {
        "database_url": database_url, "upstream_base_url": upstream.base_url,
        "auth_mode": "keys", "first_token_timeout_s": 5.0, "upstream_read_timeout_s": 5.0,
        "upstream_connect_timeout_s": 2.0, "upstream_max_retries": 0, "keepalive_s": 1.0,
        "resume_grace_s": 0.0, **overrides}
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


@asynccontextmanager
async def in_process_gateway(database_url: str, upstream: DemoLlm, **overrides: Any
                             ) -> AsyncIterator[InProcessGateway]:
    app = create_app(gateway_settings(database_url, upstream, **overrides))
    async with app.router.lifespan_context(app):
        yield InProcessGateway(app)
