"""The inline tool call scenarios ([tool-call-inline], [tool-calls-inline],
[think-tool-call], [tool-call-truncated]): the exact output docs/demo_scenarios.md promises,
and what the gateway's split with the tool format `hermes` makes of it (the calls, the text,
the warnings), as the table there says."""

from __future__ import annotations

import json

import pytest

from app.demo_llm.scenarios import SHAPES, TIME_CALL, WEATHER_CALL, ChatInput, plan_reply
from app.stream import split_reasoning

WEATHER = ("get_weather", json.dumps(WEATHER_CALL["arguments"]))
TIME = ("get_time", json.dumps(TIME_CALL["arguments"]))


def reply_to(keyword: str):  # type: ignore[no-untyped-def]
    return plan_reply(ChatInput(system="", user_text=f"Weather in Prague? [{keyword}]"))


@pytest.mark.parametrize(("keyword", "output", "text", "reasoning", "calls", "warnings"), [
    ("tool-call-inline",
     'Let me check the weather.\n<tool_call>\n{"name": "get_weather", "arguments": '
     '{"city": "Prague", "unit": "celsius"}}\n</tool_call>',
     "Let me check the weather.", "", [WEATHER], []),
    ("tool-calls-inline",
     '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Prague", "unit": '
     '"celsius"}}\n</tool_call>\n<tool_call>\n{"name": "get_time", "arguments": '
     '{"zone": "Europe/Prague"}}\n</tool_call>', "", "", [WEATHER, TIME], []),
    ("think-tool-call",
     '<think>\nI need the weather in Prague first.\n</think>\n\n<tool_call>\n{"name": '
     '"get_weather", "arguments": {"city": "Prague", "unit": "celsius"}}\n</tool_call>',
     "", "I need the weather in Prague first.", [WEATHER], []),
    ("tool-call-truncated",
     'On it. <tool_call>\n{"name": "get_weather", "arguments": {"city": "Prague", ',
     "On it.", "", [], ["tool_call_truncated"]),
])
def test_each_scenario_writes_its_calls_and_the_split_reads_them(
        keyword: str, output: str, text: str, reasoning: str, calls: list[tuple[str, str]],
        warnings: list[str]) -> None:
    assert keyword in SHAPES
    reply = reply_to(keyword)
    assert reply.text == output
    assert reply.finish_reason == ("length" if keyword == "tool-call-truncated" else "stop")
    got = split_reasoning(reply.text, tool_format="hermes")
    assert (got.text, got.reasoning, [tuple(c) for c in got.tool_calls], got.warnings) == (
        text, reasoning, calls, warnings)
    plain = split_reasoning(reply.text, tool_format="none")
    assert "<tool_call>" in plain.text  # without the format, the call is text


def test_the_thinking_of_a_call_after_thinking_is_paced_as_thinking() -> None:
    reply = reply_to("think-tool-call")
    assert reply.thinks and "".join(reply.pieces[:reply.thinking_pieces]).endswith("\n\n")
