"""The end of a turn in the core: the stored message is what was streamed, the metadata
holds the usage of every call, and the closing events say honestly whether it was stored."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest

from app.answer.answer import AnswerStream
from app.answer.call_usage import CallContext, main_call_record
from app.answer.events import Ended, Failed, Metadata, TurnFailure, Usage
from app.answer.finish import (
    StoreResult,
    closing_events,
    finished_message,
    outcome_of,
    summary_fields,
)
from app.answer.inputs import ProviderUsage, UpstreamChunk
from app.answer.pricing import PriceTable
from app.answer.recorder import TurnRecorder

START = dt.datetime(2026, 11, 24, 9, 0, tzinfo=dt.UTC)
MESSAGE = uuid.uuid4()
PROMPT = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]


def answered(chunks: list[str], usage: ProviderUsage | None = None) -> AnswerStream:
    answer = AnswerStream(keep_raw=True)
    for text in chunks:
        answer.feed(UpstreamChunk(text, model="demo-1"))
    if usage is not None:
        answer.feed(UpstreamChunk("", usage=usage, finish_reason="stop"))
    return answer


def recorded(answer: AnswerStream) -> TurnRecorder:
    recorder = TurnRecorder()
    ctx = CallContext("demo-1", {"model": "demo-1"}, PriceTable({}))
    recorder.add_call(main_call_record(
        answer, ctx, prompt=PROMPT, started_at=START, first_token_at=START,
        finished_at=START + dt.timedelta(seconds=1)))
    return recorder


def test_the_stored_message_is_the_streamed_text_with_its_metadata() -> None:
    answer = answered(["Hel", "lo <!-- METADATA: {\"language\"", ": \"en\"} -->"],
                      ProviderUsage(12, 3, 15))
    deltas = [answer.end()]
    finished = finished_message(MESSAGE, answer, recorded(answer), model="asked-for")
    assert finished.content == "Hello" and deltas == [None]
    assert finished.status == "complete" and finished.message_id == MESSAGE
    meta = finished.metadata
    assert meta["response_metadata"] == {"language": "en"}
    assert (meta["tokens"], meta["usage_source"], meta["model"]) == (15, "provider", "demo-1")
    assert meta["stream"] == {"chunks": 3, "warnings": [], "finish_reason": "stop"}
    assert [c["stage"] for c in meta["processingDetails"]["llm_calls"]] == ["main"]
    assert [c.total_tokens for c in finished.llm_calls] == [15]


def test_a_cut_answer_is_estimated_and_marked_partial() -> None:
    answer = answered(["Partial ", "answer <!-- METADATA: {"])
    finished = finished_message(MESSAGE, answer, recorded(answer), model="demo-1")
    [call] = finished.llm_calls
    assert (finished.status, finished.content) == ("interrupted", "Partial answer")
    assert (call.usage_source, call.completion_tokens) == ("partial", 8)  # 31 bytes / 4
    assert call.prompt_tokens > 0


@pytest.mark.parametrize(("stopped_by", "reason"), [
    ("client_gone", "client_gone"), ("key_revoked", "key_revoked"),
    ("shutting_down", "shutting_down"), ("stop_request", "stop_request"),
    (None, "cancelled"),  # cancelled, and nothing said why: still never without a reason
])
def test_an_interrupted_answer_says_what_stopped_it(stopped_by: str | None, reason: str
                                                    ) -> None:
    answer = answered(["Partial"])
    finished = finished_message(MESSAGE, answer, recorded(answer), model="demo-1",
                                stopped_by=stopped_by)
    assert finished.status == "interrupted"
    assert finished.metadata["interrupted_reason"] == reason


def test_only_an_interrupted_answer_has_a_reason() -> None:
    """A stop that came too late (the model had ended, or the call failed) is not what
    ended the answer: its row says nothing of it."""
    whole = answered(["Done"], ProviderUsage(1, 1, 2))
    whole.end()
    failed = answered(["Half"])
    failed.fail(TurnFailure("upstream_error", "boom"), flush=True)
    for answer in (whole, failed):
        finished = finished_message(MESSAGE, answer, recorded(answer), model="demo-1",
                                    stopped_by="client_gone")
        assert "interrupted_reason" not in finished.metadata, finished.status


def test_a_failure_is_kept_in_the_metadata_and_ends_the_stream_as_an_error() -> None:
    answer = answered(["Half"])
    answer.fail(TurnFailure("upstream_timeout", "no first token in time"), flush=True)
    finished = finished_message(MESSAGE, answer, recorded(answer), model="demo-1")
    assert finished.metadata["error"] == {"code": "upstream_timeout",
                                          "message": "no first token in time"}
    events = closing_events(finished, answer, "stored")
    assert isinstance(events[0], Usage) and events[-1] == Failed(
        "upstream_timeout", "no first token in time")


def test_a_stored_answer_closes_with_metadata_usage_and_its_status() -> None:
    answer = answered(['Hi <!-- METADATA: {"k": "\\u0000v"} -->'], ProviderUsage(1, 1, 2))
    answer.end()
    finished = finished_message(MESSAGE, answer, recorded(answer), model="demo-1")
    metadata, usage, end = closing_events(finished, answer, "stored")
    assert metadata == Metadata({"k": "v"})  # cleaned as the store cleans it
    assert usage == Usage(1, 1, 2, None, "provider")  # no price known: unknown, not zero
    assert usage.reasoning_tokens is None  # none reported: unknown, not zero
    assert end == Ended(MESSAGE, "complete")


def test_the_usage_event_counts_the_reasoning_tokens_reported() -> None:
    answer = answered(["<think>hm</think>Hi"], ProviderUsage(4, 9, 13, reasoning_tokens=6))
    answer.end()
    finished = finished_message(MESSAGE, answer, recorded(answer), model="demo-1")
    [usage] = [e for e in closing_events(finished, answer, "stored") if isinstance(e, Usage)]
    assert (usage.completion_tokens, usage.reasoning_tokens) == (9, 6)


@pytest.mark.parametrize(("result", "code"), [
    ("thread_gone", "thread_deleted"), ("already_finished", "storage_error"),
    ("failed", "storage_error"),
])
def test_an_answer_not_stored_says_so_and_nothing_else(result: StoreResult, code: str) -> None:
    answer = answered(["Hi"])
    answer.end()
    finished = finished_message(MESSAGE, answer, recorded(answer), model="demo-1")
    [event] = closing_events(finished, answer, result)
    assert isinstance(event, Failed) and event.code == code


def test_the_outcome_is_plain_values_of_the_stream() -> None:
    answer = answered(["a <!-- MSG_CONTEXT: {} --> b"])
    answer.end()
    recorder = recorded(answer)
    outcome = outcome_of(answer, recorder, model="asked-for")
    assert (outcome.status, outcome.model, outcome.text_chunks) == ("complete", "demo-1", 1)
    assert outcome.raw_chunks == ("a <!-- MSG_CONTEXT: {} --> b",)
    assert [w.kind for w in outcome.warnings] == ["context_echo"]
    assert outcome.filter_closed and outcome.calls == tuple(recorder.calls)


def test_the_summary_line_has_the_figures_and_none_of_the_text() -> None:
    answer = answered(["Secret ", "words <!-- METADATA: {\"a\": 1} -->"],
                      ProviderUsage(12, 3, 15))
    answer.end()
    recorder = recorded(answer)
    finished = finished_message(MESSAGE, answer, recorder, model="demo-1")
    fields = summary_fields(finished, outcome_of(answer, recorder, model="demo-1"),
                            duration_ms=42)
    assert fields == {"status": "complete", "chunks": 2, "ttft_ms": fields["ttft_ms"],
                      "duration_ms": 42, "tokens": 15, "usage_source": "provider",
                      "warnings": [], "error": None}
    assert "Secret" not in repr(fields)
