"""Which of a user's threads match a search box's words: by title (any part of it, case
ignored) or by the text of a visible message, through the full-text index the memory search
uses (migrations 0003 and 0008; app.followups.memory_repository describes it).

Every word must match, and the last one as a prefix too (the box searches as one types):
PostgreSQL `to_tsquery('english', 'word:* & ...')` on the indexed expression; SQLite FTS5
`content : ("word"* AND ...)`. Only word characters reach either query, so no query syntax
can be injected."""

from __future__ import annotations

import re
import uuid
from typing import Any

from sqlalchemy import ColumnElement, func, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from app.store.models import Message, Thread, table_of
from app.store.per_database import PerDatabase
from app.store.search_schema import SQLITE_FTS, pg_config, pg_vector, sqlite_fts_join
from app.store.visibility import visible_sql

#: A search box's words beyond these add nothing but cost.
MAX_WORDS = 8
_WORD = re.compile(r"\w+", re.UNICODE)

def search_words(text: str) -> list[str]:
    """The words of the query, lower-cased, each once, in order (word characters only)."""
    words: list[str] = []
    for word in _WORD.findall(text.lower()):
        word = word.strip("_")
        if word and word not in words:
            words.append(word)
    return words[:MAX_WORDS]


async def matching_thread_ids(s: AsyncSession, user_id: str, text: str) -> set[uuid.UUID]:
    """The user's threads whose title holds `text`, or with a visible message holding all
    its words."""
    words = search_words(text)
    by_title = func.lower(func.coalesce(Thread.title, "")).contains(
        text.strip().lower(), autoescape=True)
    found: ColumnElement[bool] = by_title
    if words:
        found = or_(by_title, Thread.id.in_(_threads_with_text(s, user_id, words)))
    rows = await s.execute(select(Thread.id).where(Thread.user_id == user_id, found))
    return {row[0] for row in rows}


def _threads_with_text(s: AsyncSession, user_id: str, words: list[str]) -> Any:
    """The ids of the user's threads with a visible message on their branch (the one the
    page opens on) that holds every word."""
    m = table_of(Message).c
    mine = (m.user_id == user_id, m.content != "", m.on_branch, visible_sql())
    return _WITH_TEXT.of(s)(words, mine)


def _postgres_with_text(words: list[str], mine: tuple[ColumnElement[bool], ...]) -> Any:
    m = table_of(Message).c
    query = func.to_tsquery(pg_config(), " & ".join(f"{word}:*" for word in words))
    return select(m.thread_id).where(pg_vector(m.content).op("@@")(query), *mine)


def _sqlite_with_text(words: list[str], mine: tuple[ColumnElement[bool], ...]) -> Any:
    m = table_of(Message).c
    terms = " AND ".join(f'"{word}"*' for word in words)
    return (select(m.thread_id)
            .select_from(sqlite_fts_join(table_of(Message), m.id))
            .where(SQLITE_FTS.op("MATCH")(f"content : ({terms})"), *mine))


_WITH_TEXT = PerDatabase(postgres=_postgres_with_text, sqlite=_sqlite_with_text)
