"""A turn stage that produces a thread field (title, summary) with a side call before the main
answer and stores it in the turn's finishing transaction: the field and the `llm_calls` row of
the call that produced it commit together, or neither does."""

from __future__ import annotations

import uuid
import weakref
from typing import TYPE_CHECKING

from sqlalchemy.ext.asyncio import AsyncSession

from app.logging import get_logger
from app.services.observers import TurnObserver

if TYPE_CHECKING:
    from app.services.turn import Turn
    from app.store.records import FinishedMessage


log = get_logger("services.thread_field_stage")


class ThreadFieldStage(TurnObserver):
    """Holds each turn's new value until the turn is stored; subclasses say how to store it."""

    def __init__(self) -> None:
        self._pending: weakref.WeakKeyDictionary[Turn, str] = weakref.WeakKeyDictionary()

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
        value = self._pending.get(turn)
        if value is None:
            return
        try:
            # A savepoint: a field that cannot be written must not lose the answer itself.
            async with session.begin_nested():
                await self.store(session, turn.thread.id, value)
        except Exception as exc:
            self._pending.pop(turn, None)
            log.warning("thread_field_store_failed", stage=type(self).__name__,
                        error=type(exc).__name__, detail=str(exc)[:300])

    async def after_finish(self, turn: Turn, finished: FinishedMessage) -> None:
        value = self._pending.pop(turn, None)
        if value is not None:
            self.log_stored(value)
