"""Property tests: the inline tool call split against the spec's whole-text reading, under
hostile input and any chunking."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from app.stream import MAX_BODY
from app.stream.reasoning import ReasoningFormat, ReasoningSplit, split_reasoning
from app.stream.tools import ToolCallSplit
from tests.stream.hostile import FRAGMENTS, chunkings
from tests.stream.test_reasoning_properties import MAIN, SIDE
from tests.stream.tools_streaming import reference_answer, stream_answer

#: A name only a valid call block writes: text holding it would be a leaked call.
LEAK_NAME = "zq_leak_check"

TAGS = ["<tool_call>", "</tool_call>", "<tool_call", "</tool_call", "<tool_", "</", "<",
        "<TOOL_CALL>", "<tool_calls>", "</tool_call >", "tool_call>", ">", "<think>",
        "</think>"]
BODY_BITS = ['{"name": "f"', ', "arguments": ', '"arguments": {"a": 1}', '{"a": [1, {}]}',
             '"{\\"x\\": 2}"', "null", "5", '"parameters": {}', '{"name": ""}', "}", "{",
             '"name": "g"', "\\", '"', '{"q": "<!-- MSG_CONTEXT: {} -->"}', "\n", " " * 16]
ARGUMENTS = st.sampled_from(['{"city": "Prague"}', '{ "a" : [1, 2.50, {"b": null}] }',
                             '"{\\"a\\": 1}"', "null", "{}", '{"s": "</tool_call>"}'])


@st.composite
def call_block(draw: st.DrawFn) -> str:
    """A block that is a call (the leak property's name, sometimes no closer)."""
    arguments = draw(ARGUMENTS)
    key = draw(st.sampled_from(["arguments", "parameters"]))
    body = f'{{"name": "{LEAK_NAME}", "{key}": {arguments}}}'
    gap = draw(st.sampled_from(["", "\n", " " * 16]))
    closer = draw(st.sampled_from(["</tool_call>", "\n</tool_call>", "",
                                   " " * 16 + "</tool_call>"]))
    return f"<tool_call>{gap}{body}{closer}"


piece = st.one_of(st.sampled_from(TAGS), st.sampled_from(BODY_BITS), st.sampled_from(FRAGMENTS),
                  call_block())
answers = st.lists(piece, max_size=25).map("".join)
formats = st.sampled_from(["think", "think", "none"])


@MAIN
@given(data=st.data(), content=answers, fmt=formats, offered=st.booleans())
def test_split_matches_the_reference_under_any_chunking(
    data: st.DataObject, content: str, fmt: ReasoningFormat, offered: bool
) -> None:
    """Chunking, prefix (text and calls) and hold-back: stream_answer checks them per chunk."""
    want = reference_answer(content, reasoning_format=fmt, offered=offered)
    got = stream_answer(data.draw(chunkings(content)), reasoning_format=fmt, offered=offered,
                        expected=want)
    assert (got.text, got.reasoning, got.metadata, got.warnings, got.tool_calls) == (
        want.text, want.reasoning, want.metadata, want.warnings, want.tool_calls)


@SIDE
@given(data=st.data(), content=answers, fmt=formats)
def test_streamed_equals_stored(data: st.DataObject, content: str, fmt: ReasoningFormat) -> None:
    streamed = stream_answer(data.draw(chunkings(content)), reasoning_format=fmt)
    stored = split_reasoning(content, reasoning_format=fmt, tool_format="hermes")
    assert (streamed.text, streamed.reasoning, streamed.metadata, streamed.warnings,
            streamed.tool_calls) == (stored.text, stored.reasoning, stored.metadata,
                                     stored.warnings, [tuple(c) for c in stored.tool_calls])


@SIDE
@given(data=st.data(), content=answers)
def test_no_block_that_became_a_call_leaks(data: st.DataObject, content: str) -> None:
    """No piece of text emitted at any point holds a call's block: every call block of the
    generator names LEAK_NAME, which nothing else writes."""
    got = stream_answer(data.draw(chunkings(content)), reasoning_format="none")
    shown = "".join(got.text_pieces)
    assert f'"{LEAK_NAME}"' not in shown


@SIDE
@given(data=st.data(), content=answers)
def test_prefix_text_and_calls_are_never_taken_back(data: st.DataObject, content: str) -> None:
    final = split_reasoning(content, reasoning_format="none", tool_format="hermes")
    split = ReasoningSplit("none", tool_format="hermes")
    shown, calls = "", []
    for chunk in data.draw(chunkings(content)):
        shown += split.feed(chunk)
        calls += split.new_tool_calls
        split.new_tool_calls.clear()
        assert final.text.startswith(shown)
        assert list(final.tool_calls[:len(calls)]) == calls


def test_a_long_plain_answer_holds_at_most_an_opener_prefix() -> None:
    split = ToolCallSplit()
    peak = 0
    for k in range(20_000):
        split.feed("word < <tool_c"[k % 14])
        peak = max(peak, split.held_back)
    assert peak <= len("<tool_call>") - 1


def test_a_body_over_max_body_is_text_and_not_held_longer() -> None:
    """An oversized body: the opener is text (tool_call_invalid), and at no point was more
    held than the opener, the gap and MAX_BODY."""
    body = json.dumps({"name": "f", "arguments": {"blob": "x" * (MAX_BODY + 10)}})
    split = ToolCallSplit()
    text, peak = [], 0
    for k in range(0, len(body) + 11, 1000):
        text.append(split.feed(("<tool_call>" + body)[k:k + 1000]))
        peak = max(peak, split.held_back)
    text.append(split.close())
    assert "".join(text).startswith("<tool_call>{")
    assert split.warnings == ["tool_call_invalid"] and not split.calls
    assert peak <= len("<tool_call>") + 16 + MAX_BODY


def test_unrequested_goes_where_the_first_call_ends_even_before_an_earlier_warning_kind() -> None:
    """A call, then a block that is no call: `tool_call_unrequested` (at the first call's end)
    comes before the later block's `tool_call_invalid`, at any chunking (a hypothesis find:
    the oracle once put every invalid block first)."""
    content = ('<tool_call>{"name": "get_weather", "arguments": {"city": "Prague"}}</tool_call>'
               '<tool_call>{"q": "<!-- MSG_CONTEXT: {} -->"}')
    want = reference_answer(content, reasoning_format="think", offered=False)
    assert want.warnings == ["context_echo", "tool_call_unrequested", "tool_call_invalid"]
    for size in (1, 3, 7, len(content)):
        chunks = [content[at:at + size] for at in range(0, len(content), size)]
        got = stream_answer(chunks, reasoning_format="think", offered=False, expected=want)
        assert got.warnings == want.warnings, size
