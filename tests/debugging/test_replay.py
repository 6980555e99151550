"""The replay core (app.answer.trace_replay): pure, no servers. The live traces are in
test_traces.py."""

from __future__ import annotations

import json
import uuid

import pytest

from app.answer.answer import AnswerStream
from app.answer.finish import finished_message, outcome_of
from app.answer.inputs import UpstreamChunk
from app.answer.recorder import TurnRecorder
from app.answer.trace_replay import Trace, TraceFormatError, replay, trace_from_json, trace_to_json
from app.stream import MarkerFilter
from app.turn.observers.tracing import finish_event

SEED_BUG_CHUNKS = [
    '<!-- MSG_CONTEXT: {"history": []} -->\n<!-- METADATA: {"language": "cs"}Aha, chápu.',
    " Tohle je", " odpověď.",
]


def gateway_content(chunks: list[str], *, close: bool) -> str:
    flt = MarkerFilter()
    text = "".join(flt.feed(c) for c in chunks)
    return text + (flt.close() if close else "")


def make_trace(chunks: list[str], content: str, *, closed: bool = True) -> Trace:
    return Trace(message_id="m", thread_id="t", user_id="u", model="demo-1",
                 status="complete" if closed else "interrupted", chunks=chunks,
                 events=[{"type": "finish", "filter_closed": closed, "content": content}],
                 created_at=None, stored_content=content)


def test_replay_reports_each_warning_at_the_chunk_that_raised_it() -> None:
    content = gateway_content(SEED_BUG_CHUNKS, close=True)
    result = replay(make_trace(SEED_BUG_CHUNKS, content))
    assert result.matches and result.divergence is None
    assert result.content == "Aha, chápu. Tohle je odpověď."
    assert result.metadata == {"language": "cs"}
    by_step = {s.index: [w.kind for w in s.warnings] for s in result.steps if s.warnings}
    # the echo is recognised and ended in chunk 0; the METADATA block is found unclosed
    # there too, as soon as visible text follows its body
    assert by_step == {0: ["context_echo", "metadata_at_start", "unclosed_block"]}
    assert all(w.chunk_index == 0 for w in result.warnings)


def test_an_interrupted_stream_is_replayed_without_closing_the_filter() -> None:
    chunks = ["Hello there <", "!-- META"]  # cut while a header start is held back
    stored = gateway_content(chunks, close=False)
    assert stored == "Hello there"
    assert replay(make_trace(chunks, stored, closed=False)).matches
    closed = replay(make_trace(chunks, stored, closed=True))
    assert not closed.matches  # closing would emit the held-back "<!-- META" as text


def test_replay_cleans_each_chunk_as_the_gateway_does() -> None:
    """A NUL split off a marker start: the gateway removes it before filtering, so must the
    replay, or it would show the marker the gateway removed."""
    chunks = ["Hi <!-", '\x00- METADATA: {"language": "en"} -->']
    result = replay(make_trace(chunks, "Hi"))
    assert result.matches and result.content == "Hi"
    assert result.metadata == {"language": "en"}


def test_a_changed_stored_content_is_found_at_the_chunk_where_it_differs() -> None:
    chunks = ["Hello", " big", " world"]
    result = replay(make_trace(chunks, "Hello small world"))
    assert not result.matches
    assert result.divergence == 1
    longer = replay(make_trace(chunks, "Hello big world and more"))
    assert not longer.matches and longer.divergence == len(longer.steps)


def test_trace_file_round_trip_keeps_every_field() -> None:
    trace = make_trace(SEED_BUG_CHUNKS, "x")
    again = trace_from_json(json.loads(json.dumps(trace_to_json(trace))))
    assert again == trace


@pytest.mark.parametrize(("data", "problem"), [
    ([], "one JSON object"),
    ({"format": "other"}, "'format'"),
    ({"format": "chatgate.stream_trace", "version": 9}, "version"),
    ({"format": "chatgate.stream_trace", "version": 1, "chunks": [1], "events": []}, "'chunks'"),
    ({"format": "chatgate.stream_trace", "version": 1, "chunks": [], "events": [],
      "stored_content": None}, "'stored_content'"),
])
def test_a_bad_trace_file_says_what_is_wrong(data: object, problem: str) -> None:
    with pytest.raises(TraceFormatError, match=problem):
        trace_from_json(data)


def reasoning_trace(chunks: list[UpstreamChunk], **split: str) -> tuple[Trace, AnswerStream]:
    """A trace as the gateway writes one for a reasoning answer (its finish event carries
    the raw reasoning deltas with their places, the stored reasoning and the format)."""
    answer = AnswerStream(keep_raw=True, **split)  # type: ignore[arg-type]
    for chunk in chunks:
        answer.feed(chunk)
    answer.end()
    assert answer.raw_chunks is not None and answer.raw_reasoning is not None
    finish = {"type": "finish", "filter_closed": True, "content": answer.content,
              "reasoning": answer.reasoning,
              "reasoning_chunks": [list(p) for p in answer.raw_reasoning],
              "reasoning_format": answer.reasoning_format,
              "reasoning_tag": answer.reasoning_tag}
    trace = Trace(message_id="m", thread_id="t", user_id="u", model="demo-1",
                  status="complete", chunks=list(answer.raw_chunks), events=[finish],
                  created_at=None, stored_content=answer.content)
    return trace_from_json(json.loads(json.dumps(trace_to_json(trace)))), answer


def test_a_reasoning_stream_replays_both_channels_in_their_order() -> None:
    trace, answer = reasoning_trace([
        UpstreamChunk("", reasoning="Field "), UpstreamChunk("<think>in", reasoning="then "),
        UpstreamChunk("line <!-- MSG_CONTEXT: {} --></th"), UpstreamChunk("ink>Answer."),
    ])
    result = replay(trace)
    assert result.matches and (result.content, result.reasoning) == (
        "Answer.", "Field then inline")
    assert (answer.content, answer.reasoning) == (result.content, result.reasoning)
    assert [w.kind for w in result.warnings] == ["markers_in_reasoning"]
    # the deltas before the first text are fed before it: step 0 shows them and its "in"
    assert [s.reasoning for s in result.steps][:2] == ["Field then in", "line"]


def test_a_reasoning_trace_replays_with_the_format_it_was_split_with() -> None:
    trace, _ = reasoning_trace([UpstreamChunk("thought</reason>Shown")],
                               reasoning_format="think-prefilled", reasoning_tag="reason")
    result = replay(trace)
    assert result.matches and (result.content, result.reasoning) == ("Shown", "thought")


def test_a_trace_from_before_the_split_shows_a_think_block_as_the_gateway_did() -> None:
    chunks = ["<think>x</think>", "y"]
    assert replay(make_trace(chunks, "<think>x</think>y")).matches


def tool_call_trace(chunks: list[str], *, offered: bool = True) -> tuple[Trace, AnswerStream]:
    """A trace as the gateway writes one (app.turn.observers.tracing's finish event) for an
    answer read with the `hermes` tool format."""
    answer = AnswerStream(keep_raw=True, tool_format="hermes", tools_offered=offered)
    given = []
    for chunk in chunks:
        answer.feed(UpstreamChunk(chunk))
        given += answer.take_tool_calls()
    answer.end()
    given += answer.take_tool_calls()
    assert answer.raw_chunks is not None and given == answer.tool_calls
    recorder = TurnRecorder()
    finished = finished_message(uuid.uuid4(), answer, recorder, model="demo-1")
    finish = finish_event(outcome_of(answer, recorder, model="demo-1"), finished)
    trace = Trace(message_id="m", thread_id="t", user_id="u", model="demo-1",
                  status="complete", chunks=list(answer.raw_chunks), events=[finish],
                  created_at=None, stored_content=answer.content)
    return trace_from_json(json.loads(json.dumps(trace_to_json(trace)))), answer


CALL_CHUNKS = ["Let me check.\n<tool_", 'call>{"name": "get_weather", "argu',
               'ments": {"city": "Brno"}}</tool_call>', " Done."]


def test_an_answer_with_inline_calls_replays_them_at_the_chunk_that_ended_them() -> None:
    trace, answer = tool_call_trace(CALL_CHUNKS)
    assert trace.tool_format == "hermes" and trace.tools_offered
    result = replay(trace)
    assert result.matches and result.content == answer.content == "Let me check.\n Done."
    assert [[tuple(c) for c in s.tool_calls] for s in result.steps] == [
        [], [], [("get_weather", '{"city": "Brno"}')], [], []]


def test_a_replay_whose_calls_differ_from_those_given_does_not_match() -> None:
    trace, _ = tool_call_trace(CALL_CHUNKS)
    changed = CALL_CHUNKS[2].replace("Brno", "Prague")
    altered = Trace(**{**trace.__dict__, "chunks": [*trace.chunks[:2], changed,
                                                     trace.chunks[3]]})
    result = replay(altered)
    assert result.content == trace.stored_content and not result.matches


def test_calls_of_a_request_without_tools_are_not_given_on_replay_either() -> None:
    trace, answer = tool_call_trace(CALL_CHUNKS, offered=False)
    result = replay(trace)
    assert result.matches and result.tool_calls == () and answer.tool_calls == []
    assert [w.kind for w in result.warnings] == ["tool_call_unrequested"]


def test_a_trace_from_before_the_tool_format_shows_the_call_as_text() -> None:
    content = gateway_content(CALL_CHUNKS, close=True)
    assert "<tool_call>" in content and replay(make_trace(CALL_CHUNKS, content)).matches
