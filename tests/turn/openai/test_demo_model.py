"""The built-in demo model behind /v1, as `scripts/serve` runs it: `n` choices and a
`[tool-call]` round trip through the openai SDK, every choice marker-free."""

from __future__ import annotations

import json
from typing import Any

import openai

from tests.support.gateway import InProcessGateway

TOOLS = [{"type": "function", "function": {"name": "search", "parameters": {
    "type": "object", "properties": {"query": {"type": "string"}}}}}]


def sdk(gateway: InProcessGateway, key: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=gateway.url + "/v1", api_key=key, max_retries=0)


async def test_n_choices_stream_clean_text(gateway: InProcessGateway) -> None:
    async with sdk(gateway, await gateway.api_key("demo-n")) as client:
        stream = await client.chat.completions.create(
            model="demo-1", n=3, stream=True,
            messages=[{"role": "user", "content": "Three takes [split-markers]"}])
        texts = ["", "", ""]
        async for chunk in stream:
            for choice in chunk.choices:
                texts[choice.index] += choice.delta.content or ""
    assert texts[0] and texts[0] == texts[1] == texts[2]
    assert "<!--" not in texts[0] and "MSG_CONTEXT" not in texts[0]


async def test_a_tool_call_round_trip(gateway: InProcessGateway) -> None:
    messages: list[Any] = [{"role": "user", "content": "Look up tides [tool-call]"}]
    async with sdk(gateway, await gateway.api_key("demo-tools")) as client:
        first = await client.chat.completions.create(model="demo-1", messages=messages,
                                                     tools=TOOLS)
        [call] = first.choices[0].message.tool_calls or []
        assert first.choices[0].finish_reason == "tool_calls"
        assert call.type == "function" and call.function.name == "search"
        assert json.loads(call.function.arguments) == {"query": "Look up tides"}
        messages += [first.choices[0].message.model_dump(exclude_none=True),
                     {"role": "tool", "tool_call_id": call.id, "content": "high at noon"}]
        final = await client.chat.completions.create(model="demo-1", messages=messages,
                                                     tools=TOOLS)
    text = final.choices[0].message.content or ""
    assert "Look up tides" in text and "<!--" not in text
    assert (final.model_extra or {})["chatgate"]["response_metadata"]["language"] == "en"
