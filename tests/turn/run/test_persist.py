"""The finishing transaction: what a finish costs PostgreSQL in round trips, and where a
hook's writes commit (with the message, or just after it when the hook found them late)."""

from __future__ import annotations

import uuid

import pytest
import structlog
from sqlalchemy.ext.asyncio import AsyncSession

from app.answer.finish import TurnOutcome
from app.answer.records import FinishedMessage
from app.store.db import Database
from app.store.models import Message, Thread
from app.threads import repository as threads_store
from app.turn.observers.seam import TurnHandler
from app.turn.rows import FinishedRow, turn_rows
from app.turn.run.persist import TurnStore
from tests.store.factories import call, new_thread, open_rows
from tests.support.databases import postgres_only
from tests.support.outcomes import complete_outcome
from tests.support.statements import statements_in_transaction


class TitleWriter(TurnHandler):
    """Sets the thread's title in the finish; says beforehand whether it may (`may`)."""

    def __init__(self, thread_id: uuid.UUID, *, may: bool, fails: bool = False) -> None:
        self.thread_id, self.may, self.fails = thread_id, may, fails

    def may_write_in_finish(self, finished: FinishedMessage, outcome: TurnOutcome) -> bool:
        return self.may

    async def in_finish_transaction(
        self, session: AsyncSession, finished: FinishedMessage, outcome: TurnOutcome,
        row: FinishedRow,
    ) -> None:
        await threads_store.set_title(session, self.thread_id, "set by the hook")
        if self.fails:
            raise RuntimeError("hook failed")


async def _opened(db: Database) -> tuple[Thread, Message]:
    thread = await new_thread(db)
    return thread, (await open_rows(db, thread, "hello")).assistant


async def _finish(db: Database, thread: Thread, assistant: Message, handlers: list[TurnHandler]
                  ) -> str:
    store = TurnStore(db, turn_rows(db), thread.user_id, handlers)
    return await store.store(FinishedMessage(
        assistant.id, "hi there", {}, "complete", [call()]), complete_outcome())


async def _stored(db: Database, thread: Thread, assistant: Message) -> tuple[str, str | None]:
    async with db.transaction(read_only=True) as s:
        message = await threads_store.get_message(s, thread.user_id, assistant.id)
        stored_thread = await threads_store.get_thread(s, thread.user_id, thread.id)
    assert message is not None and stored_thread is not None
    return message.status, stored_thread.title


@pytest.mark.parametrize("may", [False, True])
@postgres_only("transaction blocks and round trips are PostgreSQL's")
async def test_a_finish_no_hook_writes_in_runs_outside_a_transaction(
    db: Database, may: bool
) -> None:
    """PostgreSQL: no BEGIN and no COMMIT around the finish's one statement when no hook
    may write (a statement is atomic on its own): one round trip instead of three. A hook
    that may write gets the transaction, its writes in a savepoint, committed with the
    message; one that said no and found writes after all has them in a transaction after."""
    thread, assistant = await _opened(db)
    with statements_in_transaction(db) as statements:
        result = await _finish(db, thread, assistant, [TitleWriter(thread.id, may=may)])
    assert result == "stored"
    hook = [("SAVEPOINT", True), ("UPDATE", True), ("RELEASE", True)]
    assert statements == [("WITH", may), *hook]
    assert await _stored(db, thread, assistant) == ("complete", "set by the hook")


@postgres_only("transaction blocks and round trips are PostgreSQL's")
async def test_a_finish_nothing_writes_in_is_its_one_statement(db: Database) -> None:
    thread, assistant = await _opened(db)
    with statements_in_transaction(db) as statements:
        assert await _finish(db, thread, assistant, [TurnHandler()]) == "stored"
    assert statements == [("WITH", False)]
    assert await _stored(db, thread, assistant) == ("complete", None)


async def test_writes_found_late_that_fail_cost_no_answer(db: Database) -> None:
    thread, assistant = await _opened(db)
    with structlog.testing.capture_logs() as logs:
        result = await _finish(db, thread, assistant,
                               [TitleWriter(thread.id, may=False, fails=True)])
    assert result == "stored"
    assert await _stored(db, thread, assistant) == ("complete", None)
    assert any(line["event"] == "turn_observer_failed" for line in logs)


async def test_a_finish_retried_after_it_committed_changes_nothing(db: Database) -> None:
    """A retry of a finish that committed (its answer lost with the connection) finds the
    message finished: without a transaction to roll back, it must write nothing, not even
    move the thread."""
    thread, assistant = await _opened(db)
    assert await _finish(db, thread, assistant, []) == "stored"
    async with db.transaction(read_only=True) as s:
        before = await threads_store.get_thread(s, thread.user_id, thread.id)
    assert await _finish(db, thread, assistant, []) == "already_finished"
    async with db.transaction(read_only=True) as s:
        after = await threads_store.get_thread(s, thread.user_id, thread.id)
    assert before is not None and after is not None
    assert after.updated_at == before.updated_at


class UnsureWriter(TitleWriter):
    """Fails to say whether it may write."""

    def may_write_in_finish(self, finished: FinishedMessage, outcome: TurnOutcome) -> bool:
        raise RuntimeError("cannot tell")


async def test_a_hook_that_cannot_tell_is_logged_and_taken_for_a_yes(db: Database) -> None:
    thread, assistant = await _opened(db)
    with structlog.testing.capture_logs() as logs:
        assert await _finish(db, thread, assistant, [UnsureWriter(thread.id, may=False)]
                             ) == "stored"
    assert await _stored(db, thread, assistant) == ("complete", "set by the hook")
    [failure] = [line for line in logs if line["event"] == "turn_observer_failed"]
    assert failure["hook"] == "may_write_in_finish"
