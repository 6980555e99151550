"""Small builders shared by the store tests (real database, real repository functions)."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import select

from app.answer.records import CallRecord, FinishedMessage
from app.core.clock import utcnow
from app.followups.repository import schedule_followup
from app.store.db import Database
from app.store.models import Message, Thread
from app.threads import repository as threads_store
from app.turn.rows import DayBudget, Fork, Opened, OpeningRequest, turn_rows
from app.turn.rows import postgres as postgres_rows
from app.turn.rows import sqlite as sqlite_rows


def call(
    model: str = "gpt-4o", prompt: int = 100, completion: int = 50, *, stage: str = "main",
    cost: float | None = 0.001, source: str = "provider", status: str = "ok",
    reasoning: int | None = None,
) -> CallRecord:
    now = utcnow()
    return CallRecord(
        stage=stage, model=model, prompt_tokens=prompt, completion_tokens=completion,
        cost_usd=cost, usage_source=source,  # type: ignore[arg-type]
        started_at=now - dt.timedelta(milliseconds=900), first_token_at=now, finished_at=now,
        status=status, error=None, reasoning_tokens=reasoning,
    )


async def bill(db: Database, user_id: str, *calls: CallRecord,
               at: dt.datetime | None = None) -> None:
    """Calls billed as the gateway bills calls without a message (the turn repository's
    bill): their llm_calls rows and the user's rollup, on the UTC day of `at` (now when
    None). A test that needs usage on the books spends it this way, through the one rule
    that counts it."""
    with _store_clock(at):
        await turn_rows(db).bill(user_id, list(calls))


def spent(model: str, tokens: int, cost: float | None) -> CallRecord:
    """A call of `tokens` prompt tokens that cost `cost` (USD; None: unpriced)."""
    return call(model, tokens, 0, cost=cost)


@contextmanager
def _store_clock(at: dt.datetime | None) -> Iterator[None]:
    """The turn repository's `now` is `at` for the block (unchanged when None)."""
    if at is None:
        yield
        return
    modules = (postgres_rows, sqlite_rows)
    saved = [module.utcnow for module in modules]
    for module in modules:
        module.utcnow = lambda: at  # type: ignore[assignment]
    try:
        yield
    finally:
        for module, clock in zip(modules, saved, strict=True):
            module.utcnow = clock  # type: ignore[assignment]


async def schedule_due_followup(db: Database, thread: Thread) -> None:
    """A follow-up of the thread's, due now: what a user's next message cancels."""
    async with db.transaction() as s:
        await schedule_followup(s, thread_id=thread.id, user_id=thread.user_id,
                                trigger_type="check_in", reason="idle", due_at=utcnow())


async def new_thread(db: Database, user_id: str = "alice", title: str | None = None) -> Thread:
    async with db.transaction() as s:
        return await threads_store.create_thread(s, user_id, title)


async def open_rows(db: Database, thread: Thread, question: str | None, *,
                    history_limit: int = 0, synthetic: bool = False,
                    trigger_type: str | None = None, trigger_reason: str | None = None,
                    process_id: str | None = None, stream_cap: int | None = None,
                    budget: DayBudget | None = None, fork: Fork | None = None) -> Opened:
    """A turn opened as the gateway opens it (the turn repository's one opening): the user
    message (none when `question` is None) and the `streaming` answer. Fails the test when
    the opening stored nothing."""
    opened = await turn_rows(db).open(OpeningRequest(
        thread.user_id, thread.id, question, history_limit=history_limit,
        synthetic=synthetic, trigger_type=trigger_type, trigger_reason=trigger_reason,
        process_id=process_id, stream_cap=stream_cap, budget=budget, fork=fork))
    assert isinstance(opened, Opened), opened
    return opened


async def finish(db: Database, message_id: uuid.UUID, answer: str, *,
                 calls: list[CallRecord] | None = None, status: str = "complete",
                 metadata: dict[str, object] | None = None, reasoning: str | None = None,
                 reasoning_ms: int | None = None) -> Message:
    """The answer finished as the gateway finishes it (the turn repository's finish)."""
    calls = [call()] if calls is None else calls
    meta = metadata if metadata is not None else {"tokens": sum(c.total_tokens for c in calls)}
    row = await turn_rows(db).finish(FinishedMessage(
        message_id, answer, meta, status, calls,  # type: ignore[arg-type]
        reasoning=reasoning, reasoning_ms=reasoning_ms))
    return row.message


async def turn(
    db: Database, thread: Thread, question: str, answer: str, *,
    calls: list[CallRecord] | None = None, status: str = "complete",
    metadata: dict[str, object] | None = None, reasoning: str | None = None,
    reasoning_ms: int | None = None, fork: Fork | None = None,
) -> tuple[Message, Message]:
    """One whole turn the way the gateway does it: opened, then finished."""
    opened = await open_rows(db, thread, question, fork=fork)
    assert opened.user is not None
    finished = await finish(db, opened.assistant.id, answer, calls=calls, status=status,
                            metadata=metadata, reasoning=reasoning, reasoning_ms=reasoning_ms)
    return opened.user, finished


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
    async with db.transaction(read_only=True) as s:
        rows = await s.execute(select(Message.role, Message.content, Message.status)
                               .where(Message.thread_id == thread.id)
                               .order_by(Message.created_at))
        return [tuple(row) for row in rows]  # type: ignore[misc]
