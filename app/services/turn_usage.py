"""Usage of the main call: the provider's figures when it sent them, otherwise an estimate
from the text (app.usage.estimate), flagged `estimated` for a finished stream and `partial`
for one that was cut or failed. Never silently zero."""

from __future__ import annotations

from typing import TYPE_CHECKING

from app.services.recorder import CallRecord, UsageSource, utcnow
from app.usage.estimate import estimate_prompt_tokens, estimate_text_tokens

if TYPE_CHECKING:
    from app.services.turn import Turn


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
    never_reached = turn.failure is not None and turn.failure.code == "upstream_unavailable"
    prompt = 0 if never_reached else estimate_prompt_tokens(turn.upstream_messages)
    source: UsageSource = "estimated" if turn.status == "complete" else "partial"
    return prompt, completion, source
