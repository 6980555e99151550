"""Feeding helpers for the inline tool call split: an answer through a ReasoningSplit with the
`hermes` tool format, the spec's invariants checked after every chunk, and a whole-text
reference written from the spec's "Inline tool calls" rules over the marker and reasoning
references (its own JSON member walk, not the app's)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from app.stream.reasoning import ReasoningFormat, ReasoningSplit
from tests.stream.oracle import MAX_BODY, WS, Invalid, Truncated, object_end
from tests.stream.reasoning_streaming import reference_split
from tests.stream.streaming import OVERALL_HOLD, PLAIN_HOLD

GAP = 16


@dataclass
class ToolsResult:
    text: str
    reasoning: str
    metadata: dict[str, Any] | None
    warnings: list[str]
    tool_calls: list[tuple[str, str]]
    text_pieces: list[str] = field(default_factory=list)


def reference_call(body: str) -> tuple[str, str] | None:
    """The spec's call test on a complete body, walking its members with json's decoder."""
    decoder = json.JSONDecoder()
    members: dict[str, tuple[Any, str]] = {}
    i = 1
    while True:
        while body[i] in WS:
            i += 1
        if body[i] == "}":
            break
        if body[i] == ",":
            i += 1
            continue
        key, i = json.decoder.scanstring(body, i + 1)
        while body[i] in WS + ":":
            i += 1
        value, end = decoder.raw_decode(body, i)
        members[key] = (value, body[i:end])
        i = end
    name = members.get("name", (None, ""))[0]
    if not isinstance(name, str) or not name:
        return None
    value, source = members.get("arguments", members.get("parameters", (None, "null")))
    if value is None:
        return name, "{}"
    if isinstance(value, dict):
        return name, source
    if isinstance(value, str):
        return name, value
    return None


def reference_tools(v: str, tag: str = "tool_call"
                    ) -> tuple[str, list[tuple[str, str]], list[str], int]:
    """The spec's scan of the visible text V: (text, calls, tool call warnings, how many of
    those warnings came before the first call's block ended)."""
    opener, closer = f"<{tag}>", f"</{tag}>"
    pieces: list[str] = []
    calls: list[tuple[str, str]] = []
    warnings: list[str] = []
    first_call_at = 0
    i = 0
    while True:
        k = v.find(opener, i)
        if k < 0:
            pieces.append(v[i:])
            break
        after = k + len(opener)
        b = after
        while b < len(v) and b - after < GAP and v[b] in WS:
            b += 1
        if b == len(v):
            pieces.append(v[i:k])
            warnings.append("tool_call_truncated")
            break
        if v[b] != "{":
            pieces.append(v[i:after])
            i = after
            continue
        stop = min(len(v), b + MAX_BODY)
        try:
            q = object_end(v, b, stop)
        except Truncated:
            if stop == len(v):
                pieces.append(v[i:k])
                warnings.append("tool_call_truncated")
                break
            q = -1  # oversized
        except Invalid:
            q = -1
        call = reference_call(v[b:q]) if q >= 0 else None
        if call is None:
            warnings.append("tool_call_invalid")
            pieces.append(v[i:after])
            i = after
            continue
        pieces.append(v[i:k])
        if not calls:
            first_call_at = len(warnings)
        calls.append(call)
        e = q
        while e < len(v) and e - q < GAP and v[e] in WS:
            e += 1
        if v.startswith(closer, e):
            i = e + len(closer)
        else:
            warnings.append("tool_call_unclosed")
            i = q
    return "".join(pieces).strip(WS), calls, warnings, first_call_at


def reference_answer(content: str, field: str = "", reasoning_format: ReasoningFormat = "think",
                     tag: str = "tool_call", *, offered: bool = True) -> ToolsResult:
    """The whole answer per the spec: reasoning split, markers, then the calls in V."""
    split = reference_split(content, field, reasoning_format)
    text, calls, warnings, first_call_at = reference_tools(split.text, tag)
    if calls and not offered:
        warnings = _with_unrequested(warnings, first_call_at)
    return ToolsResult(text, split.reasoning, split.metadata, split.warnings + warnings, calls)


def _with_unrequested(warnings: list[str], at: int) -> list[str]:
    """`tool_call_unrequested` goes in once, where the first call's block ends (after the
    warnings of the blocks before it, before that block's own `tool_call_unclosed` and every
    later block's warnings)."""
    return [*warnings[:at], "tool_call_unrequested", *warnings[at:]]


def stream_answer(
    chunks: Sequence[str], field_chunks: Sequence[str] = (), *,
    reasoning_format: ReasoningFormat = "think", tag: str = "tool_call",
    offered: bool = True, expected: ToolsResult | None = None,
) -> ToolsResult:
    """The field chunks, then the content chunks, then close, through one ReasoningSplit with
    the `hermes` tool format; after every chunk: the text so far is a prefix of the expected
    one, so are the calls, no call's block is in the text, and the split holds no more than
    the spec allows."""
    split = ReasoningSplit(reasoning_format, tool_format="hermes", tool_tag=tag,
                           tools_offered=offered)
    tools = split.tool_split
    assert tools is not None
    opener_len = len(tag) + 2
    texts: list[str] = []
    thoughts: list[str] = []
    calls: list[tuple[str, str]] = []

    def check() -> None:
        calls.extend((c.name, c.arguments) for c in split.new_tool_calls)
        split.new_tool_calls.clear()
        if expected is not None:
            got = "".join(texts)
            assert expected.text.startswith(got), f"text {got!r} not a prefix"
            assert expected.tool_calls[:len(calls)] == calls, f"calls {calls!r}"
            assert expected.reasoning.startswith("".join(thoughts))
        content = split.content_filter
        if split.decided and not split.in_reasoning:
            assert content.held_back <= OVERALL_HOLD
            if not content.in_block:
                assert content.held_back <= PLAIN_HOLD
            if tools.in_block:
                assert tools.held_back <= opener_len + GAP + MAX_BODY
            else:
                assert tools.held_back <= opener_len - 1, f"held {tools.held_back} of text"

    for piece in field_chunks:
        thoughts.append(split.feed_reasoning(piece))
        check()
    for chunk in chunks:
        texts.append(split.feed(chunk))
        thoughts.append(split.take_reasoning())
        check()
    texts.append(split.close())
    thoughts.append(split.take_reasoning())
    check()
    return ToolsResult("".join(texts), "".join(thoughts), split.metadata, split.warnings, calls,
                       texts)
