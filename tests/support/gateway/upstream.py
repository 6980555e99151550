"""The demo model server as the upstream of test gateways: served in process on a real
loopback port, so gateway processes reach it too."""

from __future__ import annotations

from typing import Any

import httpx

from app.demo_llm import create_demo_app
from tests.support.gateway.servers import InProcessServer, LogSink
from tests.support.gateway.settings import ExplicitDemoSettings
from tests.support.http import LOOPBACK_TLS


class DemoLlm:
    """A running demo model server (in process, on a real loopback port: gateway
    subprocesses reach it too)."""

    def __init__(self, server: InProcessServer) -> None:
        self.server = server
        self.url = server.url

    @property
    def base_url(self) -> str:
        """What the gateway's CHATGATE_UPSTREAM_BASE_URL should be."""
        return self.url + "/v1"

    def stats(self) -> dict[str, int]:
        data: dict[str, int] = httpx.get(self.url + "/v1/_debug/stats", timeout=5,
                                          verify=LOOPBACK_TLS).json()
        return data

    def requests(self, limit: int = 20) -> list[dict[str, Any]]:
        data = httpx.get(self.url + f"/v1/_debug/requests?limit={limit}", timeout=5,
                         verify=LOOPBACK_TLS).json()
        requests: list[dict[str, Any]] = data["requests"]
        return requests

    def stop(self) -> None:
        self.server.stop()


def start_demo_llm(delay_ms: float, slow_first_s: float, **settings: Any) -> DemoLlm:
    """The demo model server at this pace (and with these other DemoSettings, such as a
    failure of every request), served in process until stop()."""
    app = create_demo_app(ExplicitDemoSettings(delay_ms=delay_ms, slow_first_s=slow_first_s,
                                               **settings))
    return DemoLlm(InProcessServer(app, LogSink(), lifespan="off"))
