"""Thread and history use cases, as JSON-ready dicts (the API shape lives here, once).

What only reads runs in a read (Database.transaction(read_only=True)): a page listing its
threads or loading one never waits behind the turns' writes on SQLite."""

from __future__ import annotations

import uuid
from typing import Any

from app.core.clock import iso_utc
from app.observe.logging import get_logger
from app.store.db import Database
from app.store.models import THREAD_ORIGINS, Message
from app.store.visibility import is_hidden
from app.threads import branch_repository as branch_store
from app.threads import repository as thread_store
from app.threads import search_repository as thread_search
from app.threads.versions import Versions, versions_of

log = get_logger("services.threads")


def message_json(message: Message, versions: Versions | None = None) -> dict[str, Any]:
    """A message as the API shows it. An answer also carries its reasoning and thinking time
    (null when it had none), apart from its text and metadata: a client shows them apart,
    and only `content` is the answer. `parent_id`: the message it follows; with `versions`
    (a thread's history), which version it is (`version` of `versions`, counted from 1) and
    the ids of all of them, oldest first, to show another."""
    shown: dict[str, Any] = {
        "id": str(message.id),
        "parent_id": str(message.parent_id) if message.parent_id else None,
        "role": message.role,
        "content": message.content,
        "status": message.status,
        "metadata": message.meta,
        "created_at": iso_utc(message.created_at),
    }
    if message.role == "assistant":
        shown["reasoning"] = message.reasoning
        shown["reasoning_ms"] = message.reasoning_ms
    if versions is not None:
        shown["on_branch"] = message.on_branch
        shown["version"] = versions.number_of(message.id)
        shown["versions"] = len(versions.ids)
        shown["version_ids"] = [str(version) for version in versions.ids]
    return shown


async def create_thread(db: Database, user_id: str, title: str | None) -> dict[str, Any]:
    async with db.transaction() as session:
        thread = await thread_store.create_thread(session, user_id, title)
    return {"id": str(thread.id), "title": thread.title, "created_at": iso_utc(thread.created_at)}


#: What a thread list may be asked for: one origin, or `all`.
LIST_ORIGINS = (*THREAD_ORIGINS, "all")


async def list_threads(db: Database, user_id: str, query: str = "",
                       origin: str | None = "chat") -> list[dict[str, Any]]:
    """The user's threads of one origin (the page's chats by default; None: every one),
    newest activity first; with a `query`, those whose title or visible text matches it
    (app.threads.search_repository)."""
    async with db.transaction(read_only=True) as session:
        summaries = await thread_store.list_threads(session, user_id, origin)
        if query.strip():
            found = await thread_search.matching_thread_ids(session, user_id, query)
            summaries = [t for t in summaries if t.id in found]
    return [
        {"id": str(t.id), "title": t.title, "message_count": t.message_count,
         "preview": t.preview, "updated_at": iso_utc(t.updated_at), "model": t.model,
         "origin": t.origin}
        for t in summaries
    ]


async def thread_messages(
    db: Database, user_id: str, thread_id: uuid.UUID, *, include_synthetic: bool,
    whole_tree: bool = False,
) -> list[dict[str, Any]] | None:
    """The messages of the thread's current branch as the user sees them, each with its
    versions (`whole_tree`: every version, in time order), or None if it is not the
    user's."""
    async with db.transaction(read_only=True) as session:
        if await thread_store.get_thread(session, user_id, thread_id) is None:
            return None
        rows = await thread_store.visible_history(
            session, user_id, thread_id, include_synthetic=True, whole_tree=whole_tree)
        versions = versions_of(await branch_store.tree_rows(session, thread_id))
    return [message_json(m, versions.get(m.id))
            for m in _visible_rows(rows, include_synthetic=include_synthetic)]


def _visible_rows(rows: list[Message], *, include_synthetic: bool) -> list[Message]:
    """The rows the user sees; each hidden (synthetic or legacy follow-up) row is logged at
    DEBUG with its trigger, and one INFO line gives the counts."""
    visible: list[Message] = []
    filtered = 0
    for message in rows:
        if is_hidden(message) and not include_synthetic:
            filtered += 1
            log.debug("history_message_filtered", filtered_message_id=str(message.id),
                      trigger_type=message.trigger_type or message.meta.get("trigger_type"))
            continue
        visible.append(message)
    log.info("history_visibility", total=len(rows), filtered=filtered, visible=len(visible),
             include_synthetic=include_synthetic)
    return visible


async def delete_thread(db: Database, user_id: str, thread_id: uuid.UUID) -> bool:
    async with db.transaction() as session:
        return await thread_store.delete_thread(session, user_id, thread_id)
