"""Usage of a turn's calls: the provider's figures when it sent them, otherwise an estimate
from the text (app.answer.estimate), flagged `estimated` for a finished call and `partial`
for one that was cut or failed. Never silently zero: only a call that never reached the
model server (`upstream_unavailable`) counts no prompt tokens."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from app.answer.answer import AnswerStream
from app.answer.estimate import (
    estimate_prompt_tokens,
    estimate_text_tokens,
    estimate_tokens_of_size,
)
from app.answer.inputs import Completion
from app.answer.pricing import PriceTable
from app.answer.records import CallRecord, FinalStatus, UsageSource

#: The failure after which nothing reached the model: no prompt was processed.
NEVER_REACHED = "upstream_unavailable"


@dataclass(frozen=True, slots=True)
class CallContext:
    """What every call record of a turn needs besides the call's own outcome: the model asked
    for (used when the server names none), the request parameters and the price table."""

    model: str
    request: dict[str, Any]
    prices: PriceTable
    #: The model server the call goes to (the catalog's name), when known.
    server: str | None = None


def main_call_record(
    answer: AnswerStream, ctx: CallContext, *, prompt: Sequence[Mapping[str, str]],
    started_at: dt.datetime, first_token_at: dt.datetime | None, finished_at: dt.datetime,
) -> CallRecord:
    """The `main` stage's record from what the turn saw of the stream."""
    source: UsageSource
    reasoning_tokens = None
    if answer.usage is not None:
        prompt_tokens = answer.usage.prompt_tokens
        completion, source = answer.usage.completion_tokens, "provider"
        reasoning_tokens = answer.usage.reasoning_tokens
    else:
        completion = estimate_tokens_of_size(answer.raw_bytes)
        never_reached = answer.failure is not None and answer.failure.code == NEVER_REACHED
        prompt_tokens = 0 if never_reached else estimate_prompt_tokens(prompt)
        source = "estimated" if answer.status == "complete" else "partial"
    model = answer.model or ctx.model
    failure = answer.failure
    return CallRecord(
        stage="main", description="Main LLM response", model=model, request=ctx.request,
        started_at=started_at, finished_at=finished_at, first_token_at=first_token_at,
        prompt_tokens=prompt_tokens, completion_tokens=completion,
        cost_usd=ctx.prices.cost_usd(model, prompt_tokens, completion),
        usage_source=source, status=answer.status,
        error=f"{failure.code}: {failure.message}" if failure else None,
        reasoning_tokens=reasoning_tokens, server=ctx.server,
    )


def attempt_record(ctx: CallContext, *, started_at: dt.datetime, finished_at: dt.datetime,
                   code: str, message: str) -> CallRecord:
    """A request that failed before its first token, and whose answer another model gave:
    its own row (status `failed`, the server named), no tokens (nothing was generated, and
    a refused or unreachable request processes no prompt)."""
    return CallRecord(
        stage="main", description="Main LLM response (failed attempt)", model=ctx.model,
        request=ctx.request, started_at=started_at, finished_at=finished_at,
        first_token_at=None, prompt_tokens=0, completion_tokens=0,
        cost_usd=ctx.prices.cost_usd(ctx.model, 0, 0), usage_source="partial",
        status="failed", error=f"{code}: {message}", server=ctx.server)


def side_call_record(
    ctx: CallContext, *, stage: str, description: str, messages: Sequence[Mapping[str, str]],
    started_at: dt.datetime, finished_at: dt.datetime, completion: Completion | None,
    status: FinalStatus, failure_code: str | None = None, error: str | None = None,
) -> CallRecord:
    """The record of a short non-streamed call (title, summary), whatever its outcome:
    provider usage when the answer carried it, else an estimate from the request and the
    answer's text (`estimated` when it completed, `partial` when it failed or was cut)."""
    model = (completion.model if completion else None) or ctx.model
    usage = completion.usage if completion else None
    source: UsageSource
    if usage is not None:
        prompt, answer, source = usage.prompt_tokens, usage.completion_tokens, "provider"
    else:
        prompt = 0 if failure_code == NEVER_REACHED else estimate_prompt_tokens(messages)
        answer = estimate_text_tokens(completion.text) if completion else 0
        source = "estimated" if status == "complete" else "partial"
    return CallRecord(
        stage=stage, description=description, model=model, request=ctx.request,
        started_at=started_at, finished_at=finished_at,
        first_token_at=finished_at if completion else None,
        prompt_tokens=prompt, completion_tokens=answer,
        cost_usd=ctx.prices.cost_usd(model, prompt, answer),
        usage_source=source, status=status, error=error,
        reasoning_tokens=usage.reasoning_tokens if usage is not None else None,
    )
