"""What the turn core hands its adapters: typed events in stream order. Each adapter (the
native SSE endpoint, the follow-up worker, later others) renders them in its own format;
none of them reaches inside the turn.

    Started     once, first: the ids of the turn's two messages
    Reasoning   clean reasoning text (the model's thinking), shown apart from the answer
    Delta       clean answer text, safe to show; `seq` counts Reasoning and Delta events
                together from 1 (one counter: a resume from an id replays both channels)
    Metadata    the answer's METADATA, after the message is stored
    Usage       the turn's token and cost totals, after the message is stored
    Ended       the stored status (and why the gateway ended it, when it did so to stop
                itself); the stream ends here ...
    Failed      ... or here: why the turn failed or was not stored
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from app.answer.records import FinalStatus, UsageSource


@dataclass(frozen=True, slots=True)
class TurnFailure:
    """Why a turn failed: an upstream code with the model server's HTTP status, or
    `internal_error` for a gateway bug."""

    code: str
    message: str
    http_status: int | None = None
    #: How long the model server asked to wait before a retry (its 429's Retry-After), to
    #: pass on to a client that gets its status.
    retry_after_s: float | None = None


@dataclass(frozen=True, slots=True)
class Started:
    thread_id: uuid.UUID
    user_message_id: uuid.UUID
    message_id: uuid.UUID


@dataclass(frozen=True, slots=True)
class Delta:
    text: str
    seq: int


@dataclass(frozen=True, slots=True)
class Reasoning:
    text: str
    seq: int


#: What an answer state returns for one chunk: a reasoning piece, a text piece, or both (the
#: reasoning first: a chunk that closes the thinking and starts the answer).
AnswerOut = Delta | Reasoning | tuple[Reasoning, Delta]


@dataclass(frozen=True, slots=True)
class Metadata:
    values: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    cost_usd: float | None
    usage_source: UsageSource
    #: The part of completion_tokens spent thinking, as the model server reported it (summed
    #: over the turn's calls); None when none reported any: unknown is not zero.
    reasoning_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class Ended:
    message_id: uuid.UUID
    status: FinalStatus
    #: Why the gateway ended the answer, when the client should know it to act on it
    #: (`shutting_down`: the process is stopping; resume or ask again elsewhere).
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class Failed:
    code: str
    message: str


TurnEvent = Started | Delta | Reasoning | Metadata | Usage | Ended | Failed
