"""The Responses API's shapes without a gateway: a body becomes the chat shape the completion
service speaks, and the event writer numbers its events and opens and closes output items in
order (text, a tool call, text after it; reasoning ahead of the message)."""

from __future__ import annotations

from typing import Any

import pytest

from app.answer.choices import ChoiceDelta
from app.turn.openai.errors import OpenAIError
from app.turn.openai.responses_render import (
    EventWriter,
    Outcome,
    output,
    stored_reasoning_tokens,
)
from app.turn.openai.responses_request import parse_responses_body


def test_input_items_become_chat_messages() -> None:
    parsed = parse_responses_body({
        "model": "m", "instructions": "Be brief.", "store": False,
        "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "Weather?"},
                                         {"type": "input_image", "image_url": "http://i/x"}]},
            {"type": "message", "role": "assistant",
             "content": [{"type": "output_text", "text": "Let me look."}]},
            {"type": "function_call", "call_id": "c1", "name": "w", "arguments": "{}"},
            {"type": "function_call", "call_id": "c2", "name": "w", "arguments": "{\"a\":1}"},
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
            {"type": "function_call_output", "call_id": "c2",
             "output": [{"type": "input_text", "text": "rain"}]},
        ],
        "tools": [{"type": "function", "name": "w", "parameters": {"type": "object"}}],
        "tool_choice": {"type": "function", "name": "w"}, "max_output_tokens": 9,
        "text": {"format": {"type": "json_object"}}, "include": ["x"], "reasoning": {},
    })
    assert parsed.messages == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [
            {"type": "text", "text": "Weather?"},
            {"type": "image_url", "image_url": {"url": "http://i/x"}}]},
        {"role": "assistant", "content": "Let me look.", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "w", "arguments": "{}"}},
            {"id": "c2", "type": "function",
             "function": {"name": "w", "arguments": "{\"a\":1}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
        {"role": "tool", "tool_call_id": "c2", "content": "rain"},
    ]
    assert parsed.params == {
        "max_tokens": 9, "response_format": {"type": "json_object"},
        "tools": [{"type": "function", "function": {"name": "w",
                                                     "parameters": {"type": "object"}}}],
        "tool_choice": {"type": "function", "function": {"name": "w"}}}
    assert (parsed.store, parsed.stream, parsed.previous_response) == (False, False, None)


@pytest.mark.parametrize(("body", "param"), [
    ({"input": "hi"}, "model"),
    ({"model": "m", "input": []}, "input"),
    ({"model": "m", "input": [{"role": "robot", "content": "x"}]}, "input[0].role"),
    ({"model": "m", "input": [{"role": {}, "content": "x"}]}, "input[0].role"),
    ({"model": "m", "input": "a\x00b"}, "input"),
    ({"model": "m", "input": "hi", "stream": "yes"}, "stream"),
    ({"model": "m", "input": "hi", "tools": [{"type": "web_search"}]}, "tools[0]"),
    ({"model": "m", "input": "hi", "max_output_tokens": 0}, "max_output_tokens"),
    ({"model": "m", "input": "hi", "previous_response_id": "chatcmpl-1"},
     "previous_response_id"),
])
def test_bad_bodies_are_400s_naming_their_param(body: dict[str, Any], param: str) -> None:
    with pytest.raises(OpenAIError) as refused:
        parse_responses_body(body)
    assert (refused.value.status, refused.value.param) == (400, param)


def test_events_are_numbered_and_items_open_and_close_in_order() -> None:
    writer = EventWriter(Outcome(id="resp_ab", created_at=0, model="m"))
    events = writer.opening()
    events += writer.delta(ChoiceDelta(0, "Checking. "))
    events += writer.delta(ChoiceDelta(0, "", tool_calls=(
        {"index": 0, "id": "c1", "function": {"name": "w", "arguments": "{\"ci"}},)))
    events += writer.delta(ChoiceDelta(0, "", tool_calls=(
        {"index": 0, "function": {"arguments": "ty\": 1}"}},)))
    events += writer.delta(ChoiceDelta(0, "Done."))
    writer.outcome.status = "completed"
    events += writer.closing(writer.outcome)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert [(e["type"], e.get("output_index")) for e in events] == [
        ("response.created", None), ("response.in_progress", None),
        ("response.output_item.added", 0), ("response.content_part.added", 0),
        ("response.output_text.delta", 0),
        ("response.output_text.done", 0), ("response.content_part.done", 0),
        ("response.output_item.done", 0),
        ("response.output_item.added", 1), ("response.function_call_arguments.delta", 1),
        ("response.function_call_arguments.delta", 1),
        ("response.function_call_arguments.done", 1), ("response.output_item.done", 1),
        ("response.output_item.added", 2), ("response.content_part.added", 2),
        ("response.output_text.delta", 2),
        ("response.output_text.done", 2), ("response.content_part.done", 2),
        ("response.output_item.done", 2), ("response.completed", None)]
    output = events[-1]["response"]["output"]
    assert [item["type"] for item in output] == ["message", "function_call", "message"]
    assert output[1]["arguments"] == "{\"city\": 1}" and output[1]["call_id"] == "c1"
    assert len({item["id"] for item in output}) == 3


def test_reasoning_is_an_item_with_one_summary_part_ahead_of_the_message() -> None:
    writer = EventWriter(Outcome(id="resp_ab", created_at=0, model="m"))
    events = writer.opening()
    events += writer.delta(ChoiceDelta(0, reasoning="Let me "))
    events += writer.delta(ChoiceDelta(0, reasoning="see."))
    events += writer.delta(ChoiceDelta(0, "Yes."))
    writer.outcome.status = "completed"
    events += writer.closing(writer.outcome)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert [(e["type"], e.get("output_index")) for e in events[2:]] == [
        ("response.output_item.added", 0), ("response.reasoning_summary_part.added", 0),
        ("response.reasoning_summary_text.delta", 0),
        ("response.reasoning_summary_text.delta", 0),
        ("response.reasoning_summary_text.done", 0), ("response.reasoning_summary_part.done", 0),
        ("response.output_item.done", 0),
        ("response.output_item.added", 1), ("response.content_part.added", 1),
        ("response.output_text.delta", 1),
        ("response.output_text.done", 1), ("response.content_part.done", 1),
        ("response.output_item.done", 1), ("response.completed", None)]
    assert events[2]["item"] == {"id": "rs_ab", "type": "reasoning", "status": "in_progress",
                                 "summary": []}
    thought = {"id": "rs_ab", "type": "reasoning", "status": "completed",
               "summary": [{"type": "summary_text", "text": "Let me see."}]}
    assert events[8]["item"] == thought
    assert events[-1]["response"]["output"][0] == thought
    whole = Outcome(id="resp_ab", created_at=0, model="m", status="completed",
                    text="Yes.", reasoning="Let me see.")
    assert output(whole)[0] == thought  # the whole reply's output as the stream's
    assert [item["type"] for item in output(whole)] == ["reasoning", "message"]


def test_an_answer_that_only_thought_still_has_its_empty_message() -> None:
    writer = EventWriter(Outcome(id="resp_ab", created_at=0, model="m"))
    events = writer.delta(ChoiceDelta(0, reasoning="hmm"))
    writer.outcome.status = "completed"
    events += writer.closing(writer.outcome)
    items = events[-1]["response"]["output"]
    assert [(item["type"], item.get("content", [{}])[0].get("text")) for item in items] == [
        ("reasoning", None), ("message", "")]
    assert [item["type"] for item in output(Outcome(
        id="resp_ab", created_at=0, model="m", reasoning="hmm"))] == ["reasoning", "message"]


def test_a_stored_answers_reasoning_tokens_come_from_its_main_call() -> None:
    meta = {"processingDetails": {"llm_calls": [
        {"stage": "title", "response": {"usage": {
            "completion_tokens_details": {"reasoning_tokens": 3}}}},
        {"stage": "main", "response": {"usage": {
            "completion_tokens_details": {"reasoning_tokens": 40}}}}]}}
    assert stored_reasoning_tokens(meta) == 40
    assert stored_reasoning_tokens({}) == 0
