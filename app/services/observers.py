"""Seams for work that plugs into a turn without rewriting it: extra upstream calls before
the main one (title, summary, memory retrieval), stream traces, metrics, follow-up
scheduling. Every hook is a no-op by default; subclass and override what you need."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlalchemy.ext.asyncio import AsyncSession

if TYPE_CHECKING:
    from app.services.turn import Turn
    from app.turns.records import FinishedMessage


class TurnObserver:
    """Hooks called by the turn pipeline, in this order."""

    async def before_main(self, turn: Turn) -> None:
        """Before the context is built: may add calls (`turn.recorder.add_call`), set
        `turn.summary` or `turn.memories`. Must not hold a DB session across awaits of
        upstream calls."""

    def on_chunk(self, turn: Turn, index: int, raw: str, emitted: str) -> None:
        """Each upstream content chunk, what the filter let through for it (sync, cheap)."""

    def on_warning(self, turn: Turn, record: dict[str, Any]) -> None:
        """Each filter warning with its chunk index and offset."""

    async def in_finish_transaction(
        self, session: AsyncSession, turn: Turn, finished: FinishedMessage
    ) -> None:
        """Inside the one transaction that stores the finished message, in a savepoint of its
        own: if it raises, its writes are rolled back, the failure is logged
        (`turn_observer_failed`) and the message is stored all the same."""

    async def after_finish(self, turn: Turn, finished: FinishedMessage) -> None:
        """After the finished message is committed (shielded from cancellation)."""
