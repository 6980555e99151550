"""What a turn hands to the store: one record per upstream call and the finished message.
Plain values, one type per concept, shared by the turn core, the store and the reports."""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass, field
from typing import Any, Literal

from app.core.clock import iso_utc

#: Where a call's token counts come from: the provider's report, an estimate of a finished
#: call, or an estimate of a call that was cut or failed.
UsageSource = Literal["provider", "estimated", "partial"]
#: How a turn (and each of its calls) ended.
FinalStatus = Literal["complete", "interrupted", "failed"]
#: A stored message's status: a final one, or `streaming` while its turn runs.
MessageStatus = Literal["complete", "streaming", "interrupted", "failed"]


@dataclass(slots=True)
class CallRecord:
    """One upstream call of a turn as the gateway measured it: one `llm_calls` row, one entry
    of `metadata.processingDetails.llm_calls`, and its share of the usage rollup.

    `cost_usd` is None when the price is unknown: unknown is not zero."""

    stage: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float | None
    usage_source: UsageSource
    started_at: dt.datetime
    finished_at: dt.datetime | None
    first_token_at: dt.datetime | None
    status: str
    error: str | None = None
    description: str = ""
    request: dict[str, Any] = field(default_factory=dict)
    #: Stage-specific facts kept with the call's metadata entry (e.g. what a summary covers).
    details: dict[str, Any] = field(default_factory=dict)
    #: The model server the call went to (the catalog's name), when known.
    server: str | None = None
    #: The provider's `completion_tokens_details.reasoning_tokens` (part of
    #: completion_tokens); None when it reported none.
    reasoning_tokens: int | None = None

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @property
    def duration_ms(self) -> int | None:
        if self.finished_at is None:
            return None
        return _ms(self.finished_at - self.started_at)

    @property
    def ttft_ms(self) -> int | None:
        if self.first_token_at is None:
            return None
        return _ms(self.first_token_at - self.started_at)

    def as_metadata(self) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "stage": self.stage,
            "description": self.description,
            "request": self.request,
            "response": {"usage": {
                "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens,
                "total_tokens": self.total_tokens,
            }},
            "usage_source": self.usage_source,
            "cost_usd": self.cost_usd,
            "status": self.status,
            "error": self.error,
            "timestamp": iso_utc(self.started_at),
            "ttft_ms": self.ttft_ms,
            "duration_ms": self.duration_ms,
        }
        if self.reasoning_tokens is not None:
            usage = entry["response"]["usage"]
            usage["completion_tokens_details"] = {"reasoning_tokens": self.reasoning_tokens}
        if self.details:
            entry["details"] = dict(self.details)
        if self.server is not None:
            entry["server"] = self.server
        return entry


@dataclass(frozen=True, slots=True)
class FinishedMessage:
    """Everything finishing an assistant message writes."""

    message_id: uuid.UUID
    content: str
    metadata: dict[str, Any]
    status: MessageStatus
    llm_calls: list[CallRecord] = field(default_factory=list)
    reasoning: str | None = None
    reasoning_ms: int | None = None


def checkpoint_entry(call: CallRecord) -> dict[str, Any]:
    """A call as a running answer's checkpoint carries it (JSON in the row's metadata): what
    its llm_calls row needs should the process die before the finish."""
    return {
        "stage": call.stage, "description": call.description, "model": call.model,
        "prompt_tokens": call.prompt_tokens, "completion_tokens": call.completion_tokens,
        "cost_usd": call.cost_usd, "usage_source": call.usage_source,
        "started_at": iso_utc(call.started_at), "first_token_at": _iso(call.first_token_at),
        "finished_at": _iso(call.finished_at), "status": call.status, "error": call.error,
        "reasoning_tokens": call.reasoning_tokens,
    }


def call_of_checkpoint(entry: dict[str, Any], *, error: str) -> CallRecord:
    """A checkpointed call of an answer whose process died. A call still running at the
    checkpoint (`interrupted`: the main call) ends there with `error`; its figures are what
    the checkpoint measured (`partial`, or the provider's when its usage had come)."""
    status = entry["status"]
    return CallRecord(
        stage=entry["stage"], description=entry.get("description", ""), model=entry["model"],
        prompt_tokens=int(entry["prompt_tokens"]),
        completion_tokens=int(entry["completion_tokens"]), cost_usd=entry["cost_usd"],
        usage_source=entry["usage_source"], started_at=_parsed(entry["started_at"]),
        finished_at=_at(entry["finished_at"]), first_token_at=_at(entry["first_token_at"]),
        status=status,
        error=entry.get("error") or (error if status == "interrupted" else None),
        reasoning_tokens=entry.get("reasoning_tokens"),
    )


def _iso(at: dt.datetime | None) -> str | None:
    return iso_utc(at) if at is not None else None


def _at(text: str | None) -> dt.datetime | None:
    return _parsed(text) if text else None


def _parsed(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def _ms(delta: dt.timedelta) -> int:
    return round(delta.total_seconds() * 1000)
