"""Inline tool calls (marker spec v1.3) on the Anthropic Messages API: every public `hermes`
case, cut at random places by the model server, reaches the real anthropic SDK as `tool_use`
blocks (the call's name and its arguments as the block's input) with `stop_reason`
`tool_use` when the answer holds a call, streamed and whole, the visible text beside them
exactly the spec's."""

from __future__ import annotations

import json
from typing import Any

import anthropic

from tests.support.gateway import InProcessGateway
from tests.turn.anthropic.test_sdk import TOOLS
from tests.turn.openai.model_server import ModelServer
from tests.turn.openai.test_tool_calls import HERMES, ask, calls_of, hermes_gateway, prepare

__all__ = ["hermes_gateway"]
MODEL = "scripted-1"


def blocks_of(message: Any) -> tuple[str, list[tuple[str, Any]], str | None]:
    text = "".join(block.text for block in message.content if block.type == "text")
    calls = [(block.name, block.input) for block in message.content if block.type == "tool_use"]
    return text, calls, message.stop_reason


def expected_of(case: dict[str, Any]) -> tuple[str, list[tuple[str, Any]], str]:
    calls = [(name, json.loads(arguments)) for name, arguments in calls_of(case)]
    return case["text"], calls, "tool_use" if calls else "end_turn"


async def test_every_case_is_tool_use_blocks_streamed_and_whole(
    hermes_gateway: InProcessGateway, model_server: ModelServer
) -> None:
    client = anthropic.AsyncAnthropic(base_url=hermes_gateway.url, max_retries=0,
                                      api_key=await hermes_gateway.api_key("tools-anthropic"))
    async with client:
        for case in HERMES:
            whole = await client.messages.create(
                model=MODEL, max_tokens=512, tools=TOOLS,
                messages=ask(prepare(model_server, case, "anthropic-whole")))  # type: ignore[arg-type]
            assert blocks_of(whole) == expected_of(case), case["id"]
            async with client.messages.stream(
                    model=MODEL, max_tokens=512, tools=TOOLS,
                    messages=ask(prepare(model_server, case, "anthropic-stream")),  # type: ignore[arg-type]
            ) as stream:
                streamed = await stream.get_final_message()
            assert blocks_of(streamed) == expected_of(case), case["id"]
