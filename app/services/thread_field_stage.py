"""A turn stage that produces a thread field (title, summary) with a side call before the main
answer and stores it in the turn's finishing transaction: the field and the `llm_calls` row of
the call that produced it commit together, or neither does."""

from __future__ import annotations

import uuid
import weakref
from typing import TYPE_CHECKING

from sqlalchemy.ext.asyncio import AsyncSession

from app.services.observers import TurnObserver

if TYPE_CHECKING:
    from app.services.turn import Turn
    from app.turns.records import FinishedMessage


class ThreadFieldStage(TurnObserver):
    """Holds each turn's new value until the turn is stored; subclasses say how to store it."""

    def __init__(self) -> None:
        self._pending: weakref.WeakKeyDictionary[Turn, str] = weakref.WeakKeyDictionary()
        self._written: weakref.WeakKeyDictionary[Turn, str] = weakref.WeakKeyDictionary()

    def keep(self, turn: Turn, value: str) -> None:
        """The value to store with this turn."""
        self._pending[turn] = value

    async def store(self, session: AsyncSession, thread_id: uuid.UUID, value: str) -> None:
        """Writes the value (inside the finishing transaction)."""
        raise NotImplementedError

    def log_stored(self, value: str) -> None:
        """One log line once the value is committed."""

    async def in_finish_transaction(
        self, session: AsyncSession, turn: Turn, finished: FinishedMessage
    ) -> None:
        value = self._pending.pop(turn, None)
        if value is None:
            return
        await self.store(session, turn.thread.id, value)
        self._written[turn] = value  # reached only when the write worked (see Turn._store)

    async def after_finish(self, turn: Turn, finished: FinishedMessage) -> None:
        value = self._written.pop(turn, None)
        if value is not None:
            self.log_stored(value)
