"""The built-in demo model behind /v1, as `scripts/serve` runs it: `n` choices and a
`[tool-call]` round trip through the openai SDK, every choice marker-free."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import openai

from tests.support.gateway import DemoLlm, GatewayPool, InProcessGateway
from tests.support.http import sdk

TOOLS = [{"type": "function", "function": {"name": "search", "parameters": {
    "type": "object", "properties": {"query": {"type": "string"}}}}}]


def client_of(gateway: InProcessGateway, key: str) -> openai.AsyncOpenAI:
    return sdk(gateway.url + "/v1", key)


async def test_n_choices_stream_clean_text(gateway: InProcessGateway) -> None:
    async with client_of(gateway, await gateway.api_key("demo-n")) as client:
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
    async with client_of(gateway, await gateway.api_key("demo-tools")) as client:
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


async def test_the_inline_tool_call_scenarios_through_a_hermes_gateway(
    live_backend: str, demo_llm: DemoLlm, live_log_dir: Path
) -> None:
    """`scripts/serve` with CHATGATE_TOOL_FORMAT=hermes: each inline scenario of the demo
    model comes out as the SDK's tool calls (docs/demo_scenarios.md's table)."""
    want = {"tool-call-inline": (["get_weather"], "Let me check the weather."),
            "tool-calls-inline": (["get_weather", "get_time"], None),
            "think-tool-call": (["get_weather"], None),
            "tool-call-truncated": ([], "On it.")}
    with GatewayPool(live_log_dir) as pool:
        hermes = pool.start(live_backend, upstream=demo_llm,
                            env={"CHATGATE_TOOL_FORMAT": "hermes"})
        async with client_of(hermes, await hermes.api_key("demo-inline")) as client:
            for keyword, (names, text) in want.items():
                whole = await client.chat.completions.create(
                    model="demo-1", tools=TOOLS,
                    messages=[{"role": "user", "content": f"Weather? [{keyword}]"}])
                message = whole.choices[0].message
                assert [c.function.name for c in message.tool_calls or []] == names, keyword
                assert message.content == text, keyword
