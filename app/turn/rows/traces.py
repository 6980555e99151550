"""Stream traces (`stream_traces`): the raw upstream chunks of one stream and the filter's
events, written in the turn's finishing transaction, read back for scripts/replay_stream.py.

Chunks and events are sanitised like message content (PostgreSQL JSONB refuses NUL, UTF-8
cannot hold a lone surrogate); what was changed is counted in the finish event's `sanitized`,
so a replay that differs because of it says why."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from app.answer.trace_replay import Trace
from app.core.cleaning import SanitizeReport, clean_json
from app.store.models import Message, StreamTrace


async def save_trace(
    s: AsyncSession,
    *,
    message_id: uuid.UUID,
    thread_id: uuid.UUID,
    user_id: str,
    model: str | None,
    status: str,
    chunks: Sequence[str],
    events: Sequence[dict[str, Any]],
) -> uuid.UUID:
    """Insert one trace in the caller's transaction; returns its id."""
    report = SanitizeReport()
    clean_chunks = clean_json(list(chunks), report)
    clean_events: list[dict[str, Any]] = clean_json(list(events), report)
    if report.counts:
        clean_events = [
            {**e, "sanitized": dict(report.counts)} if e.get("type") == "finish" else e
            for e in clean_events
        ]
    row = StreamTrace(
        id=uuid.uuid4(), message_id=message_id, thread_id=thread_id, user_id=user_id,
        model=model, chunks=clean_chunks, events=clean_events, status=status,
    )
    s.add(row)
    await s.flush()
    return row.id


async def load_trace(s: AsyncSession, message_id: uuid.UUID) -> Trace | None:
    """The newest trace of a message with the message as stored now, or None. An operator's
    lookup: not scoped to a user."""
    result = await s.execute(
        select(StreamTrace, Message.content, Message.meta)
        .join(Message, Message.id == StreamTrace.message_id)
        .where(StreamTrace.message_id == message_id)
        .order_by(StreamTrace.created_at.desc())
        .limit(1)
    )
    found = result.first()
    if found is None:
        return None
    row, content, meta = found
    response_metadata = (meta or {}).get("response_metadata")
    return Trace(
        message_id=str(row.message_id), thread_id=str(row.thread_id), user_id=row.user_id,
        model=row.model, status=row.status, chunks=list(row.chunks or []),
        events=list(row.events or []), created_at=row.created_at.isoformat(),
        stored_content=content,
        stored_metadata=response_metadata if isinstance(response_metadata, dict) else {},
    )
