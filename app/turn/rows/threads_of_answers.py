"""What the turn repository does alike on both databases for an answer whose thread is not a
turn's own: the Responses API's, whose exchange starts a thread, or continues the thread of
an earlier answer with the history up to it (app.turn.rows.messages.history_until)."""

from __future__ import annotations

import uuid

from app.store.db import Database
from app.threads import repository as thread_store
from app.turn.rows.messages import HistoryRow, history_until


class AnswerThreads:
    """Mixed into each database's TurnRows: one implementation for both."""

    db: Database

    async def history_until(self, user_id: str, answer_id: uuid.UUID, *, limit: int
                            ) -> tuple[uuid.UUID, list[HistoryRow]] | None:
        """The thread of the user's answer and its history up to it (None: no such
        answer of the user's)."""
        async with self.db.transaction(read_only=True) as session:
            return await history_until(session, user_id, answer_id, limit=limit)

    async def new_thread(self, user_id: str, *, origin: str) -> uuid.UUID:
        """A new, empty thread of the user's, made by `origin` (THREAD_ORIGINS)."""
        async with self.db.transaction(quick=True) as session:
            return (await thread_store.create_thread(session, user_id, origin=origin)).id

    async def drop_thread(self, user_id: str, thread_id: uuid.UUID) -> None:
        """The thread made for an answer that was refused before its rows were stored."""
        async with self.db.transaction(quick=True) as session:
            await thread_store.delete_thread(session, user_id, thread_id)
