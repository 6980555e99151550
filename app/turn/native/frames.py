"""A turn's events in the native SSE format (docs/api.md): the bytes app.turn.native.log_stream
writes, each event one frame of app.api.sse's shape."""

from __future__ import annotations

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
from app.api.sse import frame, json_bytes
from app.observe.redaction import SECRETS


def encode(event: TurnEvent) -> bytes:
    """A turn event in the native format (docs/api.md): deltas and reasoning pieces carry
    `id:` = their place in the one count of both (what Last-Event-ID resumes from)."""
    match event:
        case Delta(text, seq):
            return b"id: %d\nevent: delta\ndata: %b\n\n" % (seq, json_bytes({"text": text}))
        case Reasoning(text, seq):
            return b"id: %d\nevent: reasoning\ndata: %b\n\n" % (seq, json_bytes({"text": text}))
        case Started(thread_id, user_message_id, message_id):
            return frame("message_start", {
                "thread_id": str(thread_id), "user_message_id": str(user_message_id),
                "assistant_message_id": str(message_id)})
        case Metadata(values):
            return frame("metadata", values)
        case Usage():
            return frame("usage", {
                "prompt_tokens": event.prompt_tokens,
                "completion_tokens": event.completion_tokens,
                "total_tokens": event.total_tokens, "cost_usd": event.cost_usd,
                "usage_source": event.usage_source,
                "reasoning_tokens": event.reasoning_tokens})
        case Ended(message_id, status, reason):
            end: dict[str, str] = {"message_id": str(message_id), "status": status}
            if reason is not None:
                end["reason"] = reason
            return frame("message_end", end)
        case Failed(code, message):
            return frame("error", {"code": code, "message": SECRETS.text(message)})
