"""Turn events as plain JSON objects and back, for a turn log kept outside the process (Redis
Streams): a reader on another gateway process gets the very events the owner's core made,
and renders them in its own format.

    event_from_json(event_to_json(event)) == event
"""

from __future__ import annotations

import uuid
from typing import Any

from app.answer.events import (
    Delta,
    Ended,
    Failed,
    Metadata,
    Reasoning,
    Started,
    TurnEvent,
    Usage,
)


class BadEvent(ValueError):
    """A stored event that is not one this gateway writes."""


def event_to_json(event: TurnEvent) -> dict[str, Any]:
    match event:
        case Delta(text, seq):
            return {"k": "delta", "text": text, "seq": seq}
        case Reasoning(text, seq):
            return {"k": "reasoning", "text": text, "seq": seq}
        case Started(thread_id, user_message_id, message_id):
            return {"k": "started", "thread_id": str(thread_id),
                    "user_message_id": str(user_message_id), "message_id": str(message_id)}
        case Metadata(values):
            return {"k": "metadata", "values": values}
        case Usage():
            return {"k": "usage", "prompt_tokens": event.prompt_tokens,
                    "completion_tokens": event.completion_tokens,
                    "total_tokens": event.total_tokens, "cost_usd": event.cost_usd,
                    "usage_source": event.usage_source,
                    "reasoning_tokens": event.reasoning_tokens}
        case Ended(message_id, status, reason):
            ended = {"k": "ended", "message_id": str(message_id), "status": status}
            return ended if reason is None else {**ended, "reason": reason}
        case Failed(code, message):
            return {"k": "failed", "code": code, "message": message}


def event_from_json(data: dict[str, Any]) -> TurnEvent:
    try:
        return _decode(data)
    except (KeyError, TypeError, ValueError) as exc:
        raise BadEvent(str(data.get("k"))) from exc


def _decode(data: dict[str, Any]) -> TurnEvent:
    kind = data["k"]
    if kind == "delta":
        return Delta(str(data["text"]), int(data["seq"]))
    if kind == "reasoning":
        return Reasoning(str(data["text"]), int(data["seq"]))
    if kind == "started":
        return Started(uuid.UUID(data["thread_id"]), uuid.UUID(data["user_message_id"]),
                       uuid.UUID(data["message_id"]))
    if kind == "metadata":
        return Metadata(dict(data["values"]))
    if kind == "usage":
        reasoning = data.get("reasoning_tokens")  # absent from a log written before it
        return Usage(int(data["prompt_tokens"]), int(data["completion_tokens"]),
                     int(data["total_tokens"]), data["cost_usd"], data["usage_source"],
                     None if reasoning is None else int(reasoning))
    if kind == "ended":
        reason = data.get("reason")
        return Ended(uuid.UUID(data["message_id"]), data["status"],
                     None if reason is None else str(reason))
    if kind == "failed":
        return Failed(str(data["code"]), str(data["message"]))
    raise BadEvent(str(kind))


def is_last(event: TurnEvent) -> bool:
    """The event that ends a turn's stream (`message_end` or `error`)."""
    return isinstance(event, Ended | Failed)
