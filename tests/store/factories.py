"""Small builders shared by the store tests (real database, real repository functions)."""

from __future__ import annotations

import datetime as dt
import uuid

from sqlalchemy import select

from app.clock import utcnow
from app.records import CallRecord, FinishedMessage
from app.store import messages as messages_store
from app.store import threads as threads_store
from app.store.db import Database
from app.store.followups import schedule_followup
from app.store.models import Message, Thread


def call(
    model: str = "gpt-4o", prompt: int = 100, completion: int = 50, *, stage: str = "main",
    cost: float | None = 0.001, source: str = "provider", status: str = "ok",
) -> CallRecord:
    now = utcnow()
    return CallRecord(
        stage=stage, model=model, prompt_tokens=prompt, completion_tokens=completion,
        cost_usd=cost, usage_source=source,  # type: ignore[arg-type]
        started_at=now - dt.timedelta(milliseconds=900), first_token_at=now, finished_at=now,
        status=status, error=None,
    )


async def schedule_due_followup(db: Database, thread: Thread) -> None:
    """A follow-up of the thread's, due now: what a user's next message cancels."""
    async with db.transaction() as s:
        await schedule_followup(s, thread_id=thread.id, user_id=thread.user_id,
                                trigger_type="check_in", reason="idle", due_at=utcnow())


async def new_thread(db: Database, user_id: str = "alice", title: str | None = None) -> Thread:
    async with db.transaction() as s:
        return await threads_store.create_thread(s, user_id, title)


async def turn(
    db: Database, thread: Thread, question: str, answer: str, *,
    calls: list[CallRecord] | None = None, status: str = "complete",
    metadata: dict[str, object] | None = None,
) -> tuple[Message, Message]:
    """One whole turn the way the gateway does it: user message + open in one transaction,
    finish in another."""
    async with db.transaction() as s:
        user = await messages_store.append_user_message(s, thread, question)
        assistant = await messages_store.open_assistant_message(s, thread)
    calls = [call()] if calls is None else calls
    meta = metadata if metadata is not None else {"tokens": sum(c.total_tokens for c in calls)}
    async with db.transaction() as s:
        finished = await messages_store.finish_assistant_message(
            s, FinishedMessage(assistant.id, answer, meta, status, calls)  # type: ignore[arg-type]
        )
    return user, finished.message


async def legacy_prompt(db: Database, thread: Thread, content: str) -> Message:
    """A follow-up prompt as an older gateway stored it: a plain user row, no flag anywhere."""
    now = utcnow()
    message = Message(id=uuid.uuid4(), thread_id=thread.id, user_id=thread.user_id, role="user",
                      content=content, meta={}, status="complete", synthetic=False,
                      created_at=now, updated_at=now, completed_at=now)
    async with db.transaction() as s:
        s.add(message)
    return message


def random_user() -> str:
    return f"user-{uuid.uuid4().hex[:8]}"


async def thread_rows(db: Database, thread: Thread) -> list[tuple[str, str, str]]:
    """The thread's messages as (role, content, status), in order."""
    async with db.read() as s:
        rows = await s.execute(select(Message.role, Message.content, Message.status)
                               .where(Message.thread_id == thread.id)
                               .order_by(Message.created_at))
        return [tuple(row) for row in rows]  # type: ignore[misc]
