"""Memory retrieval before the main call: older messages of the thread that the recent window
of MSG_CONTEXT no longer holds, found by the database's full-text search, become
the turn's memories (MSG_CONTEXT `memories`)."""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Sequence

from app.config.settings import Settings
from app.context import ContextItem, select_within_budget
from app.followups import memory_repository as memory
from app.followups.recall_query import choose_query_source
from app.observe.logging import get_logger
from app.store.db import Database
from app.turn.observers.seam import ContextDraft, TurnHandler, TurnView

log = get_logger("followups.recall")

MEMORY_LIMIT = 3
MEMORY_MAX_CHARS = 1000


def window_start(view: TurnView, window: Sequence[ContextItem]) -> dt.datetime:
    """The oldest message MSG_CONTEXT's history will hold (`window`: select_within_budget of
    the history); memories are older than it."""
    return window[0].time if window else view.user_message_at


class MemoryRecall:
    def __init__(self, db: Database, settings: Settings, *, limit: int = MEMORY_LIMIT,
                 max_chars: int = MEMORY_MAX_CHARS) -> None:
        self.db = db
        self.settings = settings
        self.limit = limit
        self.max_chars = max_chars

    def open(self, view: TurnView) -> TurnHandler:
        return _RecallHandler(self, view)


class _RecallHandler(TurnHandler):
    def __init__(self, recall: MemoryRecall, view: TurnView) -> None:
        self.recall = recall
        self.view = view

    @functools.cached_property
    def _window(self) -> list[ContextItem]:
        """The history MSG_CONTEXT will hold, chosen once for both of its uses here."""
        return select_within_budget(self.view.history, self.recall.settings.context_budget_chars)

    async def before_main(self, draft: ContextDraft) -> None:
        if not self.view.synthetic and self._window_holds_everything():
            return
        try:
            await self._recall(draft)
        except Exception as exc:  # memories help the answer; their absence must not fail it
            log.exception("memory_recall_failed", error=type(exc).__name__)

    def _window_holds_everything(self) -> bool:
        """The model already sees every message of the thread a memory could be (a short
        thread, most turns): no query. Rows left out of the history (streaming, empty, a
        failed answer) are never older than its oldest message, which its question is.
        Follow-up prompts (a few per process) still ask: their query source may be missing,
        which is logged."""
        return self.view.history_complete and len(self._window) == len(self.view.history)

    async def _recall(self, draft: ContextDraft) -> None:
        view, recall = self.view, self.recall
        source = choose_query_source(
            current_text=view.user_text, current_is_synthetic=view.synthetic,
            last_real_user_text=await self._last_real_user_text(), summary=draft.summary,
        )
        if source is None:
            log.error("empty thread - no query source", synthetic=view.synthetic)
            return
        log.debug("memory_query_source", source=source.name)
        # beside the writer, never behind it
        async with recall.db.one_statement(read_only=True) as runner:
            found = await memory.search_thread(
                runner, view.thread_id, source.text,
                before=window_start(view, self._window),
                limit=recall.limit,
            )
        draft.memories = [
            ContextItem(role=m.role, content=m.content[:recall.max_chars], time=m.created_at)
            for m in sorted(found, key=lambda m: m.created_at)
        ]
        log.info("memories_recalled", source=source.name, count=len(draft.memories))

    async def _last_real_user_text(self) -> str | None:
        """What the user last wrote, a follow-up prompt's query when it has none of its own;
        a real message is its own query."""
        if not self.view.synthetic:
            return None
        async with self.recall.db.transaction(read_only=True) as session:
            last_real = await memory.last_real_user_message(session, self.view.thread_id)
        return last_real.content if last_real else None
