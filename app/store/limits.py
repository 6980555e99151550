"""What the turn limits read and count: a user's streaming answers, their turn requests per
minute window, their usage of a UTC day. The rules deciding on these numbers are the limits
service's (app/services/limits.py); nothing here refuses anything."""

from __future__ import annotations

import datetime as dt
import functools

from sqlalchemy import Executable, Select, String, bindparam, delete, func, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession

from app.store.models import Message, RateLimitWindow, UserTokenUsage, table_of
from app.store.usage import PERIOD_DAY

#: First key of the two-key advisory locks taken here, so they never meet another
#: feature's advisory locks (whose keys are other numbers).
USER_LOCK_NAMESPACE = 0x43474C4D  # "CGLM"


async def lock_user_and_count_streaming(s: AsyncSession, user_id: str) -> int:
    """The user's streaming answers (as count_streaming), counted under a lock of the user's
    held until the transaction ends, across processes: openings that insert their rows first
    and then call this are serialised over this call and their commit only, and each counts
    the rows the ones before it committed. PostgreSQL: one statement, a function taking a
    transaction-level advisory lock on a hash of the user id (a collision only serialises two
    users more than needed) and counting after it (migration 0007). SQLite: BEGIN IMMEDIATE
    already serialises the whole transaction."""
    if s.get_bind().dialect.name == "postgresql":
        return int(await s.scalar(_LOCK_AND_COUNT, {"user_id": user_id}) or 0)
    return await count_streaming(s, user_id)


#: Built once, a Core query: it runs before every turn.
_LOCK_AND_COUNT = select(func.chatgate_lock_user_streams(
    USER_LOCK_NAMESPACE, bindparam("user_id", type_=String())))


async def count_streaming(s: AsyncSession, user_id: str) -> int:
    """The user's assistant messages still `streaming` (in every thread and process)."""
    return int(await s.scalar(_COUNT_STREAMING, {"user_id": user_id}) or 0)


def _count_streaming() -> Select[int]:
    m = table_of(Message).c
    return select(func.count()).select_from(table_of(Message)).where(
        m.user_id == bindparam("user_id", type_=m.user_id.type),
        m.status == "streaming", m.role == "assistant")


#: Built once, a Core query: it runs before every turn.
_COUNT_STREAMING = _count_streaming()


async def count_request(s: AsyncSession, user_id: str, window_start: dt.datetime) -> int:
    """Add one request to the user's window and return the window's count, this one
    included: one atomic upsert (concurrent requests never lose a count). The user's older
    windows are deleted on the way, so the table holds at most a row per user."""
    windows = table_of(RateLimitWindow)
    await s.execute(delete(windows).where(
        windows.c.user_id == user_id, windows.c.window_start < window_start))
    upsert = _count_upsert(s.get_bind().dialect.name)
    return int((await s.execute(upsert, {"user_id": user_id, "window_start": window_start,
                                         "request_count": 1})).scalar_one())


@functools.cache
def _count_upsert(dialect: str) -> Executable:
    """The counting upsert, built once per dialect (as the usage rollup's): it runs on every
    turn."""
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    windows = table_of(RateLimitWindow)
    return insert(windows).on_conflict_do_update(
        index_elements=["user_id", "window_start"],
        set_={"request_count": windows.c.request_count + 1},
    ).returning(windows.c.request_count)


async def usage_of_day(s: AsyncSession, user_id: str, day: dt.date) -> tuple[int, float]:
    """The user's tokens and known cost (USD) of one UTC day, every model, from the rollup."""
    query = select(func.coalesce(func.sum(UserTokenUsage.total_tokens), 0),
                   func.coalesce(func.sum(UserTokenUsage.cost_usd), 0)).where(
        UserTokenUsage.user_id == user_id, UserTokenUsage.period_type == PERIOD_DAY,
        UserTokenUsage.period_start == day)
    tokens, cost = (await s.execute(query)).one()
    return int(tokens or 0), float(cost or 0)
