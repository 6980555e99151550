"""The call in Anthropic's wire format: a `message` object for a whole reply, and for a stream
the events `message_start`, `ping`, `content_block_start` / `content_block_delta` /
`content_block_stop` per block, `message_delta` (the stop reason and usage) and
`message_stop`.

The blocks are what the call's clean deltas say (the one stream filter's output, as on every
surface): a model's reasoning is a `thinking` block (`thinking_delta`s), its text a `text`
block (`text_delta`s), each tool call a `tool_use` block (its arguments as
`input_json_delta`s). A new block opens when the kind of delta changes. The thinking blocks
carry an empty `signature`: the gateway signs nothing, and drops thinking blocks a client
sends back. The `chatgate` extension field (the answer's METADATA, the filter's warnings,
the cost, where it was stored) is on the message and on `message_delta`."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from app.answer.choices import ChoiceDelta
from app.turn.openai.chat_render import extension
from app.turn.run.completion import Closing, CompletionCall

#: Chat completions' finish reasons in Anthropic's words (anything else ends the turn).
STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use",
                "function_call": "tool_use", "content_filter": "refusal"}

Event = dict[str, Any]


def message_id(call: CompletionCall) -> str:
    return "msg_" + call.id.removeprefix("chatcmpl-")


def stop_reason(finish: str | None, tool_calls: bool) -> str:
    return "tool_use" if tool_calls else STOP_REASONS.get(finish or "stop", "end_turn")


def usage(closing: Closing) -> dict[str, Any]:
    return {"input_tokens": closing.prompt_tokens, "output_tokens": closing.completion_tokens,
            "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}


def tool_input(arguments: str) -> dict[str, Any]:
    """A tool call's arguments as the object Anthropic's `input` is; what a model wrote that
    is no JSON object is kept under `arguments` rather than lost."""
    try:
        value = json.loads(arguments or "{}")
    except ValueError:
        return {"arguments": arguments}
    return value if isinstance(value, dict) else {"arguments": value}


def tool_use_block(call: dict[str, Any], index: int) -> Event:
    function = call.get("function") or {}
    return {"type": "tool_use", "id": str(call.get("id") or f"toolu_{index}"),
            "name": str(function.get("name") or ""),
            "input": tool_input(str(function.get("arguments") or ""))}


def whole_message(call: CompletionCall, deltas: list[ChoiceDelta]) -> Event:
    """The non-streamed message: its thinking, its text (the concatenation of the deltas a
    stream would have sent), its tool calls."""
    choice = call.choices.choices[0]
    text = "".join(d.text for d in deltas if d.index == 0)
    finish = next((d.finish_reason for d in reversed(deltas) if d.finish_reason), None)
    content: list[Event] = []
    if reasoning := choice.answer.reasoning:
        content.append({"type": "thinking", "thinking": reasoning, "signature": ""})
    if text or (not content and not choice.tool_calls):  # a client reads `content[0]`
        content.append({"type": "text", "text": text})
    content += [tool_use_block(c, i) for i, c in enumerate(choice.tool_calls)]
    return {"id": message_id(call), "type": "message", "role": "assistant",
            "model": call.request.model, "content": content,
            "stop_reason": stop_reason(finish, bool(choice.tool_calls)),
            "stop_sequence": None, "usage": usage(call.closing),
            "chatgate": extension(call.closing)}


@dataclass
class _Block:
    kind: str  # "thinking", "text" or "tool_use"
    tool: int | None = None  # the tool call's index, for a tool_use block


class EventWriter:
    """The events of one streamed call, in order: `opening`, `delta` per delta, `closing`."""

    def __init__(self, call: CompletionCall, input_tokens: int) -> None:
        self.call = call
        self.input_tokens = input_tokens
        self._open: _Block | None = None
        self._count = 0  # blocks opened so far; the open one's index is _count - 1
        self._finish: str | None = None
        self._tool_calls = False

    def opening(self) -> list[Event]:
        """`message_start` (its input tokens the gateway's estimate until the model server
        says), then a `ping`, as Anthropic starts a stream."""
        return [{"type": "message_start", "message": {
            "id": message_id(self.call), "type": "message", "role": "assistant",
            "model": self.call.request.model, "content": [], "stop_reason": None,
            "stop_sequence": None, "usage": {
                "input_tokens": self.input_tokens, "output_tokens": 0,
                "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}}},
            {"type": "ping"}]

    def delta(self, delta: ChoiceDelta) -> list[Event]:
        if delta.index != 0:
            return []
        events: list[Event] = []
        if delta.reasoning:
            events += self._into(_Block("thinking"), {"type": "thinking", "thinking": "",
                                                      "signature": ""})
            events.append(self._delta({"type": "thinking_delta", "thinking": delta.reasoning}))
        if delta.text:
            events += self._into(_Block("text"), {"type": "text", "text": ""})
            events.append(self._delta({"type": "text_delta", "text": delta.text}))
        for call in delta.tool_calls:
            events += self._tool_call(call)
        if delta.finish_reason:
            self._finish = delta.finish_reason
        return events

    def _tool_call(self, call: dict[str, Any]) -> list[Event]:
        self._tool_calls = True
        position = call.get("index", 0)
        events = self._into(_Block("tool_use", position),
                            {**tool_use_block(call, position), "input": {}})
        arguments = (call.get("function") or {}).get("arguments")
        if arguments:
            events.append(self._delta({"type": "input_json_delta", "partial_json": arguments}))
        return events

    def _into(self, block: _Block, start: Event) -> list[Event]:
        """Nothing when this block is the open one; else the open one's stop and this one's
        start."""
        if self._open == block:
            return []
        events = self._stop()
        self._open = block
        self._count += 1
        events.append({"type": "content_block_start", "index": self._count - 1,
                       "content_block": start})
        return events

    def _delta(self, body: Event) -> Event:
        return {"type": "content_block_delta", "index": self._count - 1, "delta": body}

    def _stop(self) -> list[Event]:
        if self._open is None:
            return []
        self._open = None
        return [{"type": "content_block_stop", "index": self._count - 1}]

    def closing(self) -> list[Event]:
        """The last block's stop (an empty text block when the answer had none, as a client
        reads `content[0]`), `message_delta` with the stop reason and the usage, and
        `message_stop`."""
        events: list[Event] = []
        if self._count == 0:
            events += self._into(_Block("text"), {"type": "text", "text": ""})
        events += self._stop()
        closing = self.call.closing
        events.append({"type": "message_delta",
                       "delta": {"stop_reason": stop_reason(self._finish, self._tool_calls),
                                 "stop_sequence": None},
                       "usage": usage(closing), "chatgate": extension(closing)})
        events.append({"type": "message_stop"})
        return events
