"""Memory retrieval before the main call: older messages of the thread that the recent window
of MSG_CONTEXT no longer holds, found by the database's full-text search, become
`turn.memories` (MSG_CONTEXT `memories`)."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

from app.context import ContextItem, select_within_budget
from app.followups.recall_query import choose_query_source
from app.logging import get_logger
from app.services.observers import TurnObserver
from app.store import memory
from app.store.db import Database

if TYPE_CHECKING:
    from app.services.turn import Turn

log = get_logger("followups.recall")

MEMORY_LIMIT = 3
MEMORY_MAX_CHARS = 1000


def window_start(turn: Turn) -> dt.datetime:
    """The oldest message MSG_CONTEXT's history will hold; memories are older than it."""
    window = select_within_budget(turn.history, turn.deps.settings.context_budget_chars)
    return window[0].time if window else turn.user_message.created_at


class MemoryRecall(TurnObserver):
    def __init__(self, db: Database, *, limit: int = MEMORY_LIMIT,
                 max_chars: int = MEMORY_MAX_CHARS) -> None:
        self.db = db
        self.limit = limit
        self.max_chars = max_chars

    async def before_main(self, turn: Turn) -> None:
        try:
            await self._recall(turn)
        except Exception as exc:  # memories help the answer; their absence must not fail it
            log.exception("memory_recall_failed", error=type(exc).__name__)

    async def _recall(self, turn: Turn) -> None:
        current = turn.user_message
        synthetic = current.synthetic is True
        async with self.db.transaction() as session:
            last_real = (
                await memory.last_real_user_message(session, turn.thread.id) if synthetic else None
            )
            source = choose_query_source(
                current_text=current.content, current_is_synthetic=synthetic,
                last_real_user_text=last_real.content if last_real else None,
                summary=turn.summary,
            )
            if source is None:
                log.error("empty thread - no query source", synthetic=synthetic)
                return
            log.debug("memory_query_source", source=source.name)
            found = await memory.search_thread(
                session, turn.thread.id, source.text, before=window_start(turn),
                limit=self.limit,
            )
        turn.memories = [
            ContextItem(role=m.role, content=m.content[:self.max_chars], time=m.created_at)
            for m in sorted(found, key=lambda m: m.created_at)
        ]
        log.info("memories_recalled", source=source.name, count=len(turn.memories))
