"""Call records in the core: the provider's figures when it sent them, else an estimate
flagged `estimated` (finished) or `partial` (cut or failed); never a silent zero, except the
prompt of a call that never reached the model server."""

from __future__ import annotations

import datetime as dt

from app.answer.answer import AnswerStream
from app.answer.call_usage import CallContext, main_call_record, side_call_record
from app.answer.estimate import estimate_prompt_tokens
from app.answer.events import TurnFailure
from app.answer.inputs import Completion, ProviderUsage, UpstreamChunk
from app.answer.pricing import ModelPrice, PriceTable

AT = dt.datetime(2026, 11, 24, 9, 0, tzinfo=dt.UTC)
PROMPT = [{"role": "user", "content": "hello there"}]
CTX = CallContext("demo-1", {"model": "demo-1"},
                  PriceTable({"demo-1": ModelPrice(prompt=1.0, completion=2.0)}))


def main(answer: AnswerStream) -> tuple[int, int, str, float | None]:
    call = main_call_record(answer, CTX, prompt=PROMPT, started_at=AT, first_token_at=None,
                            finished_at=AT)
    return call.prompt_tokens, call.completion_tokens, call.usage_source, call.cost_usd


def test_provider_usage_wins_and_is_priced() -> None:
    answer = AnswerStream()
    answer.feed(UpstreamChunk("hi", usage=ProviderUsage(1000, 500, 1500)))
    answer.end()
    assert main(answer) == (1000, 500, "provider", 0.002)


def test_without_usage_a_finished_call_is_estimated_and_a_cut_one_partial() -> None:
    done = AnswerStream()
    done.feed(UpstreamChunk("12345678"))
    done.end()
    assert main(done)[:3] == (estimate_prompt_tokens(PROMPT), 2, "estimated")
    cut = AnswerStream()
    cut.feed(UpstreamChunk("12345678"))
    assert main(cut)[:3] == (estimate_prompt_tokens(PROMPT), 2, "partial")


def test_a_call_that_never_reached_the_server_counts_no_prompt() -> None:
    answer = AnswerStream()
    answer.fail(TurnFailure("upstream_unavailable", "connection refused"), flush=False)
    assert main(answer)[:3] == (0, 0, "partial")


def test_side_calls_follow_the_same_rules() -> None:
    ok = side_call_record(CTX, stage="title", description="Thread title", messages=PROMPT,
                          started_at=AT, finished_at=AT, status="complete",
                          completion=Completion("A title", None, "other-model"))
    assert (ok.model, ok.usage_source, ok.completion_tokens) == ("other-model", "estimated", 2)
    assert ok.cost_usd is None  # other-model has no price: unknown, not zero
    failed = side_call_record(CTX, stage="title", description="Thread title", messages=PROMPT,
                              started_at=AT, finished_at=AT, status="failed", completion=None,
                              failure_code="upstream_unavailable")
    assert (failed.prompt_tokens, failed.usage_source, failed.first_token_at) == (
        0, "partial", None)


def test_the_providers_reasoning_tokens_go_with_its_figures_and_never_with_an_estimate() -> None:
    answer = AnswerStream()
    answer.feed(UpstreamChunk("hi", usage=ProviderUsage(100, 80, 180, reasoning_tokens=60)))
    answer.end()
    call = main_call_record(answer, CTX, prompt=PROMPT, started_at=AT, first_token_at=None,
                            finished_at=AT)
    assert (call.completion_tokens, call.reasoning_tokens) == (80, 60)
    assert call.as_metadata()["response"]["usage"]["completion_tokens_details"] == {
        "reasoning_tokens": 60}
    estimated = AnswerStream()
    estimated.feed(UpstreamChunk("12345678"))
    estimated.end()
    plain = main_call_record(estimated, CTX, prompt=PROMPT, started_at=AT,
                             first_token_at=None, finished_at=AT)
    assert plain.reasoning_tokens is None
    assert "completion_tokens_details" not in plain.as_metadata()["response"]["usage"]
    side = side_call_record(CTX, stage="title", description="Thread title", messages=PROMPT,
                            started_at=AT, finished_at=AT, status="complete",
                            completion=Completion("A title", ProviderUsage(5, 9, 14, 4), None))
    assert side.reasoning_tokens == 4
