"""Refusals through the openai SDK: the native limits in OpenAI's statuses (the SDK raises its
typed errors from them), and a model server's own refusal passed on."""

from __future__ import annotations

import openai
import pytest

from tests.support.gateway import StartGateway, free_port
from tests.support.http import sdk
from tests.support.scripted_upstream import scripted_upstream

ASK = [{"role": "user", "content": "hello"}]


async def test_the_rate_limit_is_a_429_the_sdk_understands(start_gateway: StartGateway) -> None:
    gateway = start_gateway("sqlite", upstream=f"http://127.0.0.1:{free_port()}/v1",
                            env={"CHATGATE_RATE_LIMIT_PER_MINUTE": "1"})
    client = sdk(gateway.url + "/v1", await gateway.api_key("hasty"))
    async with client:
        with pytest.raises(openai.InternalServerError) as first:  # nobody listens upstream
            await client.chat.completions.create(model="demo-1", messages=ASK)
        with pytest.raises(openai.RateLimitError) as second:
            await client.chat.completions.create(model="demo-1", messages=ASK)
    assert first.value.status_code == 502
    assert first.value.body["code"] == "upstream_unavailable"  # type: ignore[index]
    assert second.value.body["code"] == "rate_limited"  # type: ignore[index]
    assert int(second.value.response.headers["Retry-After"]) >= 1


@pytest.mark.parametrize("stream", [True, False])
async def test_a_model_server_429_is_passed_on_with_its_retry_after(
    start_gateway: StartGateway, stream: bool
) -> None:
    refusal = b'{"error": {"message": "slow down", "type": "rate_limit"}}'
    async with scripted_upstream(refusal, status="429 Too Many Requests",
                                 content_type="application/json",
                                 headers={"Retry-After": "7"}) as url:
        gateway = start_gateway("sqlite", upstream=url)
        client = sdk(gateway.url + "/v1", await gateway.api_key("crowded"))
        async with client:
            with pytest.raises(openai.RateLimitError) as caught:
                await client.chat.completions.create(model="demo-1", messages=ASK,
                                                     stream=stream)
    assert caught.value.body["code"] == "upstream_error"  # type: ignore[index]
    assert "slow down" not in caught.value.message  # the model server's words stay in the log
    # the SDK waits what the model server asked before its own retry
    assert caught.value.response.headers["Retry-After"] == "7"


async def test_with_auth_off_any_key_will_do(start_gateway: StartGateway) -> None:
    gateway = start_gateway("sqlite", upstream=f"http://127.0.0.1:{free_port()}/v1",
                            env={"CHATGATE_AUTH_MODE": "off"})
    async with sdk(gateway.url + "/v1", "anything") as client:
        models = await client.models.list()
    assert [m.id for m in models.data] == ["demo-1"]
