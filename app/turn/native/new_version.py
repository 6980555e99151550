"""Regenerate, Edit and the version shown: a thread is a tree (app.threads.versions).

Regenerate asks the model again for an answer to the same question: the new answer is a
version beside the old one. Edit sends a new text in place of a question: the new question
is a version beside the old one, with answers of its own. Either is a turn whose rows fork
the thread (app.turn.rows.Fork): the branch first ends at the message they follow, so the
model is shown the branch of the new version only. Nothing is deleted; showing another
version moves the branch back (app.turn.rows.branches)."""

from __future__ import annotations

import uuid
from typing import Any

from app.keys.service import Principal
from app.observe.logging import get_logger
from app.store.db import Database
from app.store.errors import ThreadBusy
from app.store.models import Message
from app.store.visibility import is_hidden
from app.threads import branch_repository as branch_store
from app.threads import repository as thread_store
from app.threads.service import thread_messages
from app.threads.versions import newest_leaf
from app.turn.admission.gate import TurnGate
from app.turn.admission.opening import ThreadNotFound
from app.turn.native.continuing import MessageNotFound
from app.turn.native.turn import Turn, admit_turn
from app.turn.rows import Fork
from app.turn.rows.branches import move_branch

log = get_logger("services.turn")


class NoNewVersion(Exception):
    """This message cannot have a new version made this way; `code` is the API's error
    code, the message a sentence for the user."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


async def admit_regeneration(gate: TurnGate, principal: Principal, thread_id: uuid.UUID,
                             answer_id: uuid.UUID, model: str | None = None) -> Turn:
    """A new answer to the question the answer `answer_id` replies to, beside it. Raises
    MessageNotFound, NoNewVersion, or admit_turn's refusals."""
    answer, question = await _message_of(gate.deps.db, principal.user_id, thread_id,
                                         answer_id, with_parent=True)
    if answer.role != "assistant" or answer.status == "streaming":
        raise NoNewVersion("not_regenerable", "only a finished answer can be regenerated")
    if question is None or question.role != "user":
        raise NoNewVersion("not_regenerable", "this answer has no question to answer again")
    return await admit_turn(gate, principal, thread_id, None, model, fork=Fork(question.id),
                            question=question)


async def admit_edit(gate: TurnGate, principal: Principal, thread_id: uuid.UUID, content: str,
                     model: str | None, edit_of: uuid.UUID) -> Turn:
    """The user's new text as a new version of their question `edit_of`, and its answer.
    Raises MessageNotFound, NoNewVersion, or admit_turn's refusals."""
    question, _ = await _message_of(gate.deps.db, principal.user_id, thread_id, edit_of)
    if question.role != "user" or is_hidden(question):
        raise NoNewVersion("not_editable", "only a message you wrote can be edited")
    return await admit_turn(gate, principal, thread_id, content, model,
                            fork=Fork(question.parent_id))


async def show_version(db: Database, user_id: str, thread_id: uuid.UUID,
                       message_id: uuid.UUID) -> list[dict[str, Any]]:
    """The thread's branch moved to go through `message_id` and, below it, what was written
    last under it; the thread's messages as they now show. Raises ThreadNotFound,
    MessageNotFound, ThreadBusy (an answer is streaming: its branch stays)."""
    async with db.transaction() as session:
        if await thread_store.lock_thread(session, user_id, thread_id) is None:
            raise ThreadNotFound(str(thread_id))
        found = await thread_store.get_message(session, user_id, message_id)
        if found is None or found.thread_id != thread_id:
            raise MessageNotFound(str(message_id))
        if await thread_store.is_streaming(session, thread_id):
            raise ThreadBusy(f"thread {thread_id} is streaming an answer")
        leaf = newest_leaf(await branch_store.tree_rows(session, thread_id), message_id)
        await move_branch(session, thread_id, leaf)
    log.info("version_shown", thread_id=str(thread_id), message_id=str(message_id))
    shown = await thread_messages(db, user_id, thread_id, include_synthetic=False)
    if shown is None:  # deleted just now
        raise ThreadNotFound(str(thread_id))
    return shown


async def _message_of(db: Database, user_id: str, thread_id: uuid.UUID,
                      message_id: uuid.UUID, *, with_parent: bool = False
                      ) -> tuple[Message, Message | None]:
    """The user's message in this thread, and `with_parent` the message it follows;
    MessageNotFound when it is not one of the thread's."""
    async with db.transaction(read_only=True) as session:
        found = await thread_store.get_message(session, user_id, message_id)
        if found is None or found.thread_id != thread_id:
            raise MessageNotFound(str(message_id))
        parent = (await thread_store.get_message(session, user_id, found.parent_id)
                  if with_parent and found.parent_id is not None else None)
    return found, parent
