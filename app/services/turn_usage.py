"""Usage of a turn's calls: the provider's figures when it sent them, otherwise an estimate
from the text (app.usage.estimate), flagged `estimated` for a finished call and `partial`
for one that was cut or failed. Never silently zero: only a call that never reached the
model server (`upstream_unavailable`) counts no prompt tokens."""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from app.clock import utcnow
from app.turns.records import CallRecord, UsageSource
from app.turns.records import FinalStatus as CallStatus
from app.upstream import Completion
from app.usage.estimate import estimate_prompt_tokens, estimate_text_tokens

if TYPE_CHECKING:
    from app.services.turn import Turn

#: The failure after which nothing reached the model: no prompt was processed.
NEVER_REACHED = "upstream_unavailable"


def main_call_record(turn: Turn) -> CallRecord:
    """The `main` stage's call record from what the turn saw of the stream."""
    prompt, completion, source = _main_usage(turn)
    model = turn.response_model or turn.deps.upstream.model
    failure = turn.failure
    return CallRecord(
        stage="main",
        description="Main LLM response",
        model=model,
        request=turn.deps.upstream.request_params(),
        started_at=turn.call_started,
        finished_at=utcnow(),
        first_token_at=turn.first_token_at,
        prompt_tokens=prompt,
        completion_tokens=completion,
        cost_usd=turn.deps.prices.cost_usd(model, prompt, completion),
        usage_source=source,
        status=turn.status,
        error=f"{failure.code}: {failure.message}" if failure else None,
    )


def _main_usage(turn: Turn) -> tuple[int, int, UsageSource]:
    usage = turn.provider_usage
    if usage is not None:
        return usage.prompt_tokens, usage.completion_tokens, "provider"
    completion = estimate_text_tokens("".join(turn.raw_parts))
    never_reached = turn.failure is not None and turn.failure.code == NEVER_REACHED
    prompt = 0 if never_reached else estimate_prompt_tokens(turn.upstream_messages)
    source: UsageSource = "estimated" if turn.status == "complete" else "partial"
    return prompt, completion, source


def side_call_record(
    turn: Turn,
    *,
    stage: str,
    description: str,
    max_tokens: int,
    messages: Sequence[Mapping[str, str]],
    started_at: datetime.datetime,
    completion: Completion | None,
    status: CallStatus,
    failure_code: str | None = None,
    error: str | None = None,
) -> CallRecord:
    """The record of a short non-streamed call (title, summary), whatever its outcome:
    provider usage when the answer carried it, else an estimate from the request and the
    answer's text (`estimated` when it completed, `partial` when it failed or was cut)."""
    model = (completion.model if completion else None) or turn.deps.upstream.model
    usage = completion.usage if completion else None
    source: UsageSource
    if usage is not None:
        prompt, answer, source = usage.prompt_tokens, usage.completion_tokens, "provider"
    else:
        prompt = 0 if failure_code == NEVER_REACHED else estimate_prompt_tokens(messages)
        answer = estimate_text_tokens(completion.text) if completion else 0
        source = "estimated" if status == "complete" else "partial"
    finished_at = utcnow()
    return CallRecord(
        stage=stage,
        description=description,
        model=model,
        request=turn.deps.upstream.request_params(max_tokens=max_tokens),
        started_at=started_at,
        finished_at=finished_at,
        first_token_at=finished_at if completion else None,
        prompt_tokens=prompt,
        completion_tokens=answer,
        cost_usd=turn.deps.prices.cost_usd(model, prompt, answer),
        usage_source=source,
        status=status,
        error=error,
    )
