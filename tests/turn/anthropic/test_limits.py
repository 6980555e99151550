"""The Messages API is billed and limited as chat completions are, since it is their call:
each call is counted in the key's user's usage, a key past its daily budget gets Anthropic's
429 `rate_limit_error` (with Retry-After), and a stream whose key is revoked mid-answer ends
with an `error` event the anthropic SDK raises, billed for what the model produced."""

from __future__ import annotations

import asyncio

import anthropic
import pytest

from tests.support.gateway import DemoLlm, InProcessGateway, StartGateway
from tests.turn.openai.model_server import ModelServer, answer_body
from tests.turn.openai.test_revoked_key import CUT_WITHIN_S, billed_calls, revoke, started

MODEL = "scripted-1"


async def test_each_call_is_billed_and_a_spent_budget_is_a_rate_limit_error(
    oa_gateway: InProcessGateway, model_server: ModelServer
) -> None:
    model_server.bodies["anthropic-billed"] = answer_body(["Counted."])
    ask = [{"role": "user", "content": "[case:anthropic-billed] hi"}]
    key = await oa_gateway.api_key("anthropic-budget", tokens=20)
    async with anthropic.AsyncAnthropic(base_url=oa_gateway.url, api_key=key,
                                        max_retries=0) as client:
        reply = await client.messages.create(model=MODEL, max_tokens=16, messages=ask)
        assert reply.usage.input_tokens + reply.usage.output_tokens == 18
        async with client.messages.stream(model=MODEL, max_tokens=16, messages=ask) as stream:
            assert await stream.get_final_text() == "Counted."
        with pytest.raises(anthropic.RateLimitError) as refused:
            await client.messages.create(model=MODEL, max_tokens=16, messages=ask)
    assert (refused.value.body or {})["error"]["type"] == "rate_limit_error"  # type: ignore[index]
    assert int(refused.value.response.headers["retry-after"]) >= 1
    totals = await billed_calls(oa_gateway, "anthropic-budget")
    assert (totals["llm_call_count"], totals["total_tokens"]) == (2, 36)


async def test_a_stream_whose_key_is_revoked_raises_in_the_sdk(
    start_gateway: StartGateway, live_backend: str, slow_demo_llm: DemoLlm
) -> None:
    gateway = started(start_gateway, live_backend, slow_demo_llm)
    key = await gateway.api_key("anthropic-mallory")
    seen, revoked = "", False
    async with anthropic.AsyncAnthropic(base_url=gateway.url, api_key=key,
                                        max_retries=0) as client:
        with pytest.raises(anthropic.APIStatusError) as caught:
            async with asyncio.timeout(CUT_WITHIN_S):
                async with client.messages.stream(model="demo-1", max_tokens=4096, messages=[
                        {"role": "user", "content": "[long] tell me everything"}]) as stream:
                    async for text in stream.text_stream:
                        seen += text
                        if not revoked:
                            await revoke(gateway, key)
                            revoked = True
    assert caught.value.body == {"type": "error", "error": {
        "type": "authentication_error", "message": "the API key was revoked"}}
    assert 0 < len(seen) < 2000  # far from the whole [long] answer
    totals = await billed_calls(gateway, "anthropic-mallory")
    assert totals["llm_call_count"] == 1 and totals["completion_tokens"] > 0
