"""A database outage on /v1: OpenAI's error shape, 503 with the configured Retry-After (the
SDKs retry on it), one warning line, then recovery."""

from __future__ import annotations

from tests.support.gateway import DemoLlm, StartGateway
from tests.support.outages import outage_for

ENV = {"CHATGATE_SQLITE_BUSY_TIMEOUT_S": "0.3", "CHATGATE_DATABASE_RETRY_AFTER_S": "7",
       "CHATGATE_TITLE_CALLS": "false", "CHATGATE_FIRST_TOKEN_TIMEOUT_S": "10"}
ASK = {"model": "demo-1", "messages": [{"role": "user", "content": "hi"}]}


async def test_an_outage_is_an_openai_503_then_recovers(
    live_backend: str, demo_llm: DemoLlm, start_gateway: StartGateway, own_database_url: str
) -> None:
    with outage_for(live_backend, own_database_url) as outage:
        gateway = start_gateway(live_backend, upstream=demo_llm, env=ENV,
                                database_url=outage.gateway_url)
        async with gateway.client(await gateway.api_key("patient")) as client:
            outage.start()
            down = await client.post("/v1/chat/completions", json=ASK)
            outage.end()
            back = await client.post("/v1/chat/completions", json=ASK)
    assert down.status_code == 503 and down.headers["retry-after"] == "7"
    assert down.json()["error"]["type"] == "server_error"
    assert down.json()["error"]["code"] == "database_unavailable"
    assert back.status_code == 200 and back.json()["choices"][0]["message"]["content"]
    assert "unhandled_error" not in gateway.log_text()
