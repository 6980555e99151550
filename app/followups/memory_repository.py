"""Full-text search over a thread's older messages (memory retrieval).

PostgreSQL: `to_tsvector('english', content)` with a GIN expression index
(`ix_messages_content_fts`), queried with websearch_to_tsquery (terms OR-ed), ranked by ts_rank.
SQLite: an FTS5 table `messages_fts(content, thread)` (porter stemming, unicode61) whose rowid
is the id of a small map table `message_search(id INTEGER PRIMARY KEY, message_id UNIQUE)`,
both kept in sync with `messages` by triggers. `thread` holds the message's thread id as one
token (the id's hex and a `0`, which the stemmer leaves whole), and a search matches it with
its terms: the index reads that thread's matches only, and the ranking counts the terms in
each match (`_hits`), so a search costs the same in a database of a thousand messages as of
millions; it grows with the thread's matches. The map makes a delete an indexed lookup and
survives a batch migration that copies `messages` (whose own rowids are not stable across
such a copy). All of it is created by alembic revisions 0003 and 0008; a later SQLite batch
migration of `messages` drops the triggers with the table and must re-create them (0008's
FTS_SQLITE_TRIGGERS)."""

from __future__ import annotations

import datetime as dt
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Integer,
    String,
    bindparam,
    func,
    literal,
    select,
)
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.sql import operators
from sqlalchemy.sql.expression import UnaryExpression

from app.store.db import Runner
from app.store.driver_statements import DriverStatement
from app.store.models import Message, table_of
from app.store.per_database import PerDatabase
from app.store.search_schema import SQLITE_FTS, pg_config, pg_vector, sqlite_fts_join
from app.store.visibility import visible_sql

MAX_TERMS = 16
MIN_TERM_CHARS = 3
#: Words that match nearly every message: searching for them only adds noise (SQLite FTS5 has
#: no stop-word list of its own; PostgreSQL's english configuration drops them anyway).
STOP_WORDS = frozenset({
    "about", "above", "after", "again", "all", "also", "and", "any", "are", "because", "been",
    "before", "being", "below", "between", "both", "but", "can", "could", "did", "does", "doing",
    "down", "during", "each", "few", "for", "from", "further", "had", "has", "have", "having",
    "her", "here", "hers", "herself", "him", "himself", "his", "how", "into", "its", "itself",
    "just", "more", "most", "myself", "nor", "not", "now", "off", "once", "only", "other", "our",
    "ours", "out", "over", "own", "same", "she", "should", "some", "such", "than", "that", "the",
    "their", "theirs", "them", "then", "there", "these", "they", "this", "those", "through",
    "too", "under", "until", "very", "was", "were", "what", "when", "where", "which", "while",
    "who", "whom", "why", "will", "with", "would", "you", "your", "yours",
})
_WORD = re.compile(r"\w+", re.UNICODE)


def search_terms(text: str, max_terms: int = MAX_TERMS) -> list[str]:
    """The words worth searching for: lower-cased, at least 3 characters, no stop words,
    each once, in order of appearance. Only word characters survive, so no query syntax of
    either backend can be injected."""
    terms: list[str] = []
    for word in _WORD.findall(text.lower()):
        word = word.strip("_")
        if len(word) < MIN_TERM_CHARS or word in STOP_WORDS or word in terms:
            continue
        terms.append(word)
        if len(terms) == max_terms:
            break
    return terms


@dataclass(frozen=True, slots=True)
class Memory:
    """A message found by the search: what a turn's memories need of it."""

    id: uuid.UUID
    role: str
    content: str
    created_at: dt.datetime


async def search_thread(
    s: Runner, thread_id: uuid.UUID, query_text: str, *, before: dt.datetime, limit: int
) -> list[Memory]:
    """The thread's messages created before `before` that best match query_text, best first.
    Synthetic prompts are never memories. No usable term: []. One statement built once per
    backend (the search runs before every turn on a thread longer than the context window),
    plain rows, no ORM objects."""
    terms = search_terms(query_text)
    if not terms or limit <= 0:
        return []
    search = _SEARCH.of(s)
    rows = await search.statement.rows(s, {
        "thread_id": thread_id, "before": before, "match": search.match(thread_id, terms),
        "limit": limit})
    return [Memory(**row) for row in rows]


def postgres_match(_thread_id: uuid.UUID, terms: list[str]) -> str:
    """websearch_to_tsquery's query: any of the terms (the thread is the statement's)."""
    return " or ".join(terms)


def sqlite_match(thread_id: uuid.UUID, terms: list[str]) -> str:
    """The FTS5 query: the thread's token and any of the terms in the content (terms are
    word characters only, see search_terms; quoted all the same)."""
    quoted = " OR ".join('"' + term.replace('"', '""') + '"' for term in terms)
    return f'thread : "{thread_id.hex}0" AND content : ({quoted})'


@dataclass(frozen=True, slots=True)
class _Search:
    """A database's search: its statement (parameters `thread_id`, `before`, `match`,
    `limit`), built once (it runs before every turn), and its `match` from the terms."""

    statement: DriverStatement
    match: Callable[[uuid.UUID, list[str]], str]


_M = table_of(Message).c
_COLUMNS = (_M.id, _M.role, _M.content, _M.created_at)
_THREAD = bindparam("thread_id", type_=_M.thread_id.type)
_MATCH = bindparam("match", type_=String())
_LIMIT = bindparam("limit", type_=Integer())


def _rest() -> tuple[ColumnElement[bool], ...]:
    """What both searches ask of a message besides the match: older than `before`, no longer
    streaming, not empty, visible, on the thread's branch (a version the user replaced is
    not shown to the model)."""
    return (_M.created_at < bindparam("before", type_=_M.created_at.type),
            _M.status != "streaming", _M.content != "", _M.on_branch, visible_sql())


def _postgres_search() -> DriverStatement:
    vector = pg_vector(_M.content)
    query = func.websearch_to_tsquery(pg_config(), _MATCH)
    return DriverStatement(
        select(*_COLUMNS).where(vector.op("@@")(query), _M.thread_id == _THREAD, *_rest())
        .order_by(func.ts_rank(vector, query).desc(), _M.created_at.desc()).limit(_LIMIT))


def _sqlite_search() -> DriverStatement:
    return DriverStatement(
        select(*_COLUMNS)
        .select_from(sqlite_fts_join(table_of(Message), _M.id))
        .where(SQLITE_FTS.op("MATCH")(_MATCH), _unindexed(_M.thread_id) == _THREAD, *_rest())
        .order_by(_hits(SQLITE_FTS, _M.content).desc(), _M.created_at.desc()).limit(_LIMIT))


def _hits(fts: ColumnElement[Any], content: ColumnElement[Any]) -> ColumnElement[Any]:
    """How many times the terms occur in the message's content: `highlight()` writes one
    mark before each, so its text is that much longer than the content. Like PostgreSQL's
    ts_rank, a count within the message alone: bm25 also weighs each term by its rarity in
    the whole table, which FTS5 counts by reading every posting of the term (3.8 ms a search
    with 30,000 messages holding it, against 0.9 ms with 1,000), and other users' messages
    would order this user's."""
    marked = func.highlight(fts, 0, literal("\x01"), literal(""))
    return func.length(marked) - func.length(content)


def _unindexed(column: ColumnElement[Any]) -> ColumnElement[Any]:
    """`+column`: the same value, but SQLite may not use an index for it. Given the thread's
    index on messages, the planner read the thread's messages and probed the full-text index
    once for each (2 ms a search for a word that is nowhere); from the full-text index, the
    search reads the thread's matches only (0.03 ms)."""
    return UnaryExpression(column, operator=operators.custom_op("+"), type_=column.type)


_SEARCH = PerDatabase(postgres=_Search(_postgres_search(), postgres_match),
                      sqlite=_Search(_sqlite_search(), sqlite_match))


async def last_real_user_message(s: AsyncSession, thread_id: uuid.UUID) -> Message | None:
    """What the user last wrote on the thread's branch (synthetic prompts are not the
    user)."""
    result = await s.execute(
        select(Message)
        .where(Message.thread_id == thread_id, Message.role == "user", visible_sql(),
               Message.content != "", Message.on_branch)
        .order_by(Message.created_at.desc(), Message.id.desc())
        .limit(1)
    )
    return result.scalar_one_or_none()
