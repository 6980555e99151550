"""Edit and resend: a thread's last exchange taken back, so that an edited text can be sent in
its place. The messages go through the turn's repository (app.turn.rows), which owns every
write of a turn's rows; what it reads to decide is the threads' repository's."""

from __future__ import annotations

import uuid

from app.observe.logging import get_logger
from app.store.db import Database
from app.threads import repository as thread_store
from app.turn.rows.messages import delete_from

log = get_logger("services.threads")


class ExchangeRefused(Exception):
    """The last exchange cannot be taken back now; `code` is the API's error code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


async def take_back_last_exchange(
    db: Database, user_id: str, thread_id: uuid.UUID, message_id: uuid.UUID
) -> int | None:
    """Delete the user's last message of the thread and what answered it, so that an edited
    text can be sent in its place (edit and resend); how many messages went, or None when
    the thread or the message is not the user's. Only the last exchange: an earlier one
    would leave later answers replying to a question that no longer exists; and never while
    an answer is streaming (ExchangeRefused)."""
    async with db.transaction() as session:
        if await thread_store.lock_thread(session, user_id, thread_id) is None:
            return None
        last = await thread_store.last_user_message(session, thread_id)
        if last is None or last.id != message_id:
            found = await thread_store.get_message(session, user_id, message_id)
            if found is None or found.thread_id != thread_id:
                return None
            raise ExchangeRefused("not_last_message",
                                  "only the last message you sent can be edited and sent again")
        if await thread_store.is_streaming(session, thread_id):
            raise ExchangeRefused("thread_busy", "this thread is still streaming an answer")
        removed = await delete_from(session, last)
    log.info("last_exchange_taken_back", thread_id=str(thread_id), message_id=str(message_id),
             removed=removed)
    return removed
