"""The moves of a thread's current branch (app.threads.branch_repository reads the tree). A
turn that starts a new version (Regenerate, Edit, a Responses API call that continues an
earlier answer) first makes the branch end at the message its rows follow, in the opening's
transaction; showing another version moves the branch the same way."""

from __future__ import annotations

import uuid

from sqlalchemy import Update, bindparam, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from app.store.models import Message, table_of
from app.threads.branch_repository import path_to

_MESSAGES = table_of(Message)


def _branch_to() -> Update:
    """The thread's branch made the path to `branch_end` (NULL: no message on it, for a
    new first message): only rows whose flag changes are written."""
    m = _MESSAGES
    on = m.c.id.in_(select(path_to(bindparam("branch_end", type_=m.c.id.type)).c.id))
    return (update(m)
            .where(m.c.thread_id == bindparam("branch_thread", type_=m.c.thread_id.type),
                   m.c.on_branch != on)
            .values(on_branch=on))


#: Parameters `branch_thread` (the thread) and `branch_end` (the message the branch ends
#: at, or NULL).
BRANCH_TO = _branch_to()


async def move_branch(s: AsyncSession, thread_id: uuid.UUID, end: uuid.UUID | None) -> None:
    """The thread's branch made the path to `end` (showing another version; a fork's move
    in a transaction of the session's)."""
    await s.execute(BRANCH_TO, {"branch_thread": thread_id, "branch_end": end})
