"""Plain records the repair rules work on (no SQLAlchemy state: the rules stay pure)."""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass
from typing import Any

from app.stream import ReasoningFormat, ToolFormat


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """One message row as the store holds it, the fields the rules read."""

    id: uuid.UUID
    thread_id: uuid.UUID
    user_id: str
    role: str
    content: str
    metadata: Any
    """The decoded JSON document; legacy rows may hold something other than an object."""
    synthetic: bool
    trigger_type: str | None
    created_at: dt.datetime
    reasoning: str | None = None
    """The reasoning column: None for every row stored before the reasoning split."""


@dataclass(frozen=True, slots=True)
class ScanFilter:
    """Which messages a scan looks at; None means no restriction."""

    thread_id: uuid.UUID | None = None
    user_id: str | None = None
    since: dt.datetime | None = None
    #: Only messages created before this moment (e.g. the upgrade that brought the split).
    before: dt.datetime | None = None


@dataclass(frozen=True, slots=True)
class Resplit:
    """Re-split stored answers' content with this reasoning format and tag (the gateway's
    CHATGATE_REASONING_FORMAT/_TAG): a leading thinking block stored as text by a gateway
    from before the split moves into the reasoning column. Likewise the inline tool calls."""

    reasoning_format: ReasoningFormat = "think"
    tag: str = "think"
    #: With `hermes`, inline tool call blocks (CHATGATE_TOOL_FORMAT/_TAG) stored as text by a
    #: gateway from before the format move into the row's `metadata.tool_calls`.
    tool_format: ToolFormat = "none"
    tool_tag: str = "tool_call"
