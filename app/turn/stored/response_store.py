"""A stored Responses API response's own routes: the input it was asked with, and deleting it.

    items = await response_input(db, user_id, message_id)     # None: no response of theirs
    gone = await delete_response(db, user_id, message_id)     # False: none; ResponseBusy

A response is its assistant message (app.turn.stored.response_threads); of a request's
`input` the gateway stores the last user message only (earlier turns go to the model as
context and are not kept), so the input a response lists is its exchange's stored question:
the thread's visible rows between the answer before it and the response itself. A tool round
stores no question, so its list is empty. Deleting a response takes that exchange (question
and answer) out of its thread, and the thread too when nothing is left in it: a first
response's thread goes with it; later responses of a chain stay."""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass

from app.store.db import Database
from app.store.models import Message
from app.threads import repository as thread_store
from app.turn.rows import messages as turn_messages


@dataclass(frozen=True)
class InputItem:
    """A stored message a response was asked with."""

    id: uuid.UUID
    role: str
    content: str
    created_at: dt.datetime


class ResponseBusy(Exception):
    """The response is still being written: it cannot be deleted yet."""


async def response_input(db: Database, user_id: str, message_id: uuid.UUID
                         ) -> list[InputItem] | None:
    """The response's stored input, oldest first; None for no response of this user's."""
    async with db.transaction(read_only=True) as session:
        message = await thread_store.get_message(session, user_id, message_id)
        if message is None or message.role != "assistant":
            return None
        rows = await thread_store.visible_history(session, user_id, message.thread_id,
                                                  ending_at=message_id)
    return [InputItem(row.id, row.role, row.content, row.created_at)
            for row in _exchange(rows, message_id)[:-1] if row.content]


async def delete_response(db: Database, user_id: str, message_id: uuid.UUID) -> bool:
    """Delete the response's exchange (and its thread when nothing is left); False for no
    response of this user's. ResponseBusy while it streams."""
    async with db.transaction(quick=True) as session:
        message = await thread_store.get_message(session, user_id, message_id)
        if message is None or message.role != "assistant":
            return False
        if message.status == "streaming":
            raise ResponseBusy(str(message_id))
        thread_id = message.thread_id
        rows = await thread_store.visible_history(session, user_id, thread_id,
                                                  include_synthetic=True, ending_at=message_id)
        exchange = _exchange(rows, message_id) or [message]
        await turn_messages.delete_messages(session, thread_id, [row.id for row in exchange],
                                            exchange[0].parent_id)
        if not await turn_messages.has_messages(session, thread_id):
            await thread_store.delete_thread(session, user_id, thread_id)
        else:
            await thread_store.touch_thread(session, thread_id)
    return True


def _exchange(rows: list[Message], message_id: uuid.UUID) -> list[Message]:
    """The rows from just after the answer before `message_id` up to `message_id`."""
    upto = next((i for i, row in enumerate(rows) if row.id == message_id), None)
    if upto is None:
        return []
    start = next((i + 1 for i in range(upto - 1, -1, -1) if rows[i].role == "assistant"), 0)
    return rows[start:upto + 1]
