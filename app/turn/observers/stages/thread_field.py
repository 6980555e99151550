"""A turn stage that produces a thread field (title, summary) with a side call before the main
answer and stores it in the turn's finishing transaction: the field and the `llm_calls` row of
the call that produced it commit together, or neither does."""

from __future__ import annotations

import uuid

from sqlalchemy.ext.asyncio import AsyncSession

from app.answer.finish import TurnOutcome
from app.answer.records import FinishedMessage
from app.turn.observers.seam import TurnHandler
from app.turn.rows import FinishedRow


class ThreadFieldHandler(TurnHandler):
    """Holds one turn's new value until the turn is stored; subclasses say how to store it.
    Writing is idempotent: a finishing transaction retried after a failure writes it again."""

    def __init__(self, thread_id: uuid.UUID) -> None:
        self.thread_id = thread_id
        self.value: str | None = None

    async def store(self, session: AsyncSession, value: str) -> None:
        """Writes the value (inside the finishing transaction)."""
        raise NotImplementedError

    def log_stored(self, value: str) -> None:
        """One log line once the value is committed."""

    async def in_finish_transaction(
        self, session: AsyncSession, finished: FinishedMessage, outcome: TurnOutcome,
        row: FinishedRow,
    ) -> None:
        if self.value is not None:
            await self.store(session, self.value)

    def may_write_in_finish(self, finished: FinishedMessage, outcome: TurnOutcome) -> bool:
        return self.value is not None

    def writes_in_finish(self, finished: FinishedMessage, outcome: TurnOutcome,
                         row: FinishedRow) -> bool:
        return self.value is not None

    async def after_finish(
        self, finished: FinishedMessage, outcome: TurnOutcome, *, stored: bool
    ) -> None:
        if stored and self.value is not None:
            self.log_stored(self.value)
