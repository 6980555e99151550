"""What the turn limits read and count: a user's streams (their `streaming` answers and their
open calls, the calls without a message while they run), their turn requests per minute
window, their usage of a UTC day. The rules deciding on these numbers are the limits
service's (app/turn/admission/gate.py); nothing here refuses anything."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable
from typing import Any

from sqlalchemy import (
    CTE,
    ColumnElement,
    Select,
    String,
    Table,
    Uuid,
    bindparam,
    delete,
    func,
    select,
)
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.sql.dml import ReturningInsert

from app.store.db import Runner
from app.store.models import Message, OpenCall, RateLimitWindow, table_of
from app.store.per_database import PerDatabase, Upsert, upserts

#: First key of the two-key advisory locks taken here, so they never meet another
#: feature's advisory locks (whose keys are other numbers).
USER_LOCK_NAMESPACE = 0x43474C4D  # "CGLM"
#: An id no row has: counting with it left out counts every stream.
NO_ROW = uuid.UUID(int=0)


async def lock_user_and_count_streaming(s: AsyncSession, user_id: str) -> int:
    """The user's streams (as count_streaming), counted under a lock of the user's held
    until the transaction ends, across processes: openings that insert their rows first and
    then call this are serialised over this call and their commit only, and each counts the
    rows the ones before it committed. PostgreSQL: one statement, a function taking a
    transaction-level advisory lock on a hash of the user id (a collision only serialises two
    users more than needed) and counting after it (migrations 0009, 0013). SQLite: BEGIN
    IMMEDIATE already serialises the whole transaction."""
    return await _LOCKED_COUNT.of(s)(s, user_id)


#: Built once, a Core query.
_LOCK_AND_COUNT = select(func.chatgate_lock_user_streams(
    USER_LOCK_NAMESPACE, bindparam("user_id", type_=String()), NO_ROW))


async def _locked_count_on_postgres(s: AsyncSession, user_id: str) -> int:
    return int(await s.scalar(_LOCK_AND_COUNT, {"user_id": user_id}) or 0)


def other_streams_counted(user_id: ColumnElement[str], except_id: ColumnElement[Any]) -> CTE:
    """lock_user_and_count_streaming as a CTE (`counted`, its column `others`), for a
    statement that also inserts the user's new stream (`except_id`: its answer's row or its
    open call's), left out of the count: the user's OTHER streams, whichever part of the
    statement runs first (migrations 0009, 0013). MATERIALIZED: it runs once, however often
    it is read. PostgreSQL only."""
    count = func.chatgate_lock_user_streams(USER_LOCK_NAMESPACE, user_id, except_id)
    return select(count.label("others")).cte("counted").prefix_with("MATERIALIZED")


async def count_streaming(s: AsyncSession, user_id: str) -> int:
    """The user's streams: assistant messages still `streaming` and open calls (in every
    thread and process)."""
    return int(await s.scalar(COUNT_OTHER_STREAMS, {"user_id": user_id, "except_id": NO_ROW})
               or 0)


def _count_other_streams() -> Select[int]:
    m, c = table_of(Message).c, table_of(OpenCall).c
    user_id = bindparam("user_id", type_=m.user_id.type)
    except_id = bindparam("except_id", type_=Uuid())
    answers = select(func.count()).select_from(table_of(Message)).where(
        m.user_id == user_id, m.status == "streaming", m.role == "assistant", m.id != except_id)
    calls = select(func.count()).select_from(table_of(OpenCall)).where(
        c.user_id == user_id, c.id != except_id)
    return select(answers.scalar_subquery() + calls.scalar_subquery())


#: The user's streams but one (`except_id`: a new row of the caller's own, or NO_ROW), as
#: PostgreSQL's function counts them. Built once, a Core query: it runs before every turn.
COUNT_OTHER_STREAMS = _count_other_streams()


async def take_request(s: Runner, user_id: str, window_start: dt.datetime, limit: int
                       ) -> bool:
    """Count one request in the user's window if it has room under `limit` (True), else
    count nothing (False): one atomic upsert whose update runs only below the limit, so
    concurrent requests neither lose a count nor pass the limit together. The user's older
    windows are deleted on the way, so the table holds at most a row per user: on
    PostgreSQL by the same statement (a data-modifying CTE), which then needs no
    transaction (Database.one_statement); on SQLite by a statement before it."""
    params = {"user_id": user_id, "window_start": window_start, "request_count": 1,
              "limit": limit, "of_user": user_id, "before": window_start}
    *before, counting = _TAKE.of(s)
    for statement in before:
        await s.execute(statement, params)
    return (await s.execute(counting, params)).first() is not None


_WINDOWS = table_of(RateLimitWindow)
#: Built once, as every statement a turn request runs. Its parameters are not named as the
#: table's columns: as a CTE of the upsert, SQLAlchemy would take them for the values.
_DELETE_OLDER_WINDOWS = delete(_WINDOWS).where(
    _WINDOWS.c.user_id == bindparam("of_user", type_=_WINDOWS.c.user_id.type),
    _WINDOWS.c.window_start < bindparam("before", type_=_WINDOWS.c.window_start.type))


def _counting_upsert(insert: Callable[[Table], Upsert]) -> ReturningInsert[Any]:
    """The counting upsert: its update runs only below the limit."""
    return insert(_WINDOWS).on_conflict_do_update(
        index_elements=["user_id", "window_start"],
        set_={"request_count": _WINDOWS.c.request_count + 1},
        where=_WINDOWS.c.request_count < bindparam("limit", type_=_WINDOWS.c.request_count.type),
    ).returning(_WINDOWS.c.request_count)


_COUNTING = upserts(_counting_upsert)
#: take_request's statements, run in order, the last one counting: on PostgreSQL the upsert
#: with the older windows' DELETE as a CTE (it touches other rows than the upsert's, so the
#: one snapshot they share changes nothing); on SQLite the DELETE, then the upsert.
_TAKE: PerDatabase[tuple[Any, ...]] = PerDatabase(
    postgres=(_COUNTING.postgres.add_cte(_DELETE_OLDER_WINDOWS.cte("older")),),
    sqlite=(_DELETE_OLDER_WINDOWS, _COUNTING.sqlite))
_LOCKED_COUNT = PerDatabase(postgres=_locked_count_on_postgres, sqlite=count_streaming)
