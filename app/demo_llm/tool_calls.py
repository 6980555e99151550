"""Tool calls of the demo model (pure): with `tools` in the request and `[tool-call]` in the
last message, which is the user's, the model calls the first tool instead of answering; once
the request ends with the tool's result, it answers as usual."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from app.demo_llm.scenarios import chunk_text, message_text, split_context, topic

KEYWORD = "[tool-call]"


def planned_tool_call(messages: Sequence[Mapping[str, Any]], tools: Any) -> dict[str, Any] | None:
    """The call the demo model makes, or None when it answers with text."""
    if not messages or messages[-1].get("role") != "user":
        return None
    _, text = split_context(message_text(messages[-1]))
    if KEYWORD not in text.lower() or not isinstance(tools, list) or not tools:
        return None
    function = tools[0].get("function") if isinstance(tools[0], dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(name, str):
        return None
    arguments = json.dumps({"query": topic(text.replace(KEYWORD, " "))}, ensure_ascii=False)
    return {"id": "call_demo_1", "type": "function",
            "function": {"name": name, "arguments": arguments}}


def tool_call_deltas(call: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The call as streamed `tool_calls` deltas: id, type and name first, then the arguments
    in token-sized pieces."""
    function = call["function"]
    head = {"index": 0, "id": call["id"], "type": "function",
            "function": {"name": function["name"], "arguments": ""}}
    pieces = chunk_text(function["arguments"], function["arguments"])
    return [head] + [{"index": 0, "function": {"arguments": p}} for p in pieces]
