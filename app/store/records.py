"""Plain records passed between the gateway and the store (no SQLAlchemy state inside)."""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass, field
from typing import Any, Literal

MessageStatus = Literal["complete", "streaming", "interrupted", "failed"]
UsageSource = Literal["provider", "estimated", "partial"]


@dataclass(frozen=True, slots=True)
class LlmCallRecord:
    """One upstream call of a turn; becomes one `llm_calls` row and feeds the usage rollup.

    `cost_usd` is None when the price is unknown: unknown is not zero.
    """

    stage: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    cost_usd: float | None
    usage_source: UsageSource
    started_at: dt.datetime
    first_token_at: dt.datetime | None
    finished_at: dt.datetime | None
    duration_ms: int | None
    status: str
    error: str | None = None


@dataclass(frozen=True, slots=True)
class FinishedMessage:
    """Everything finish_assistant_message writes for one assistant message."""

    message_id: uuid.UUID
    content: str
    metadata: dict[str, Any]
    status: MessageStatus
    llm_calls: list[LlmCallRecord] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class ThreadSummary:
    """A row of the thread list: counts and preview ignore synthetic messages."""

    id: uuid.UUID
    title: str | None
    message_count: int
    preview: str | None
    updated_at: dt.datetime
    created_at: dt.datetime
