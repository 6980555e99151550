"""What travels on the bus: a thread id and the ids of its new messages (never content: a
NOTIFY payload is small and the reader re-reads the rows, scoped by user). Pure."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass

CHANNEL = "chatgate_messages"


@dataclass(frozen=True)
class MessageNotice:
    thread_id: uuid.UUID
    message_ids: tuple[uuid.UUID, ...]


def encode_notice(notice: MessageNotice) -> str:
    return json.dumps({"t": str(notice.thread_id), "m": [str(m) for m in notice.message_ids]},
                      separators=(",", ":"))


def decode_notice(payload: str) -> MessageNotice | None:
    """The notice in a payload, or None when it is not one of ours."""
    try:
        data = json.loads(payload)
        return MessageNotice(uuid.UUID(data["t"]), tuple(uuid.UUID(m) for m in data["m"]))
    except (ValueError, KeyError, TypeError):
        return None
