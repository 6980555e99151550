"""API keys: `cg_` + 256 random bits, shown once; only the sha256 of the key is stored.
A fast hash is enough for a high-entropy token (nothing to brute-force), and it makes the
lookup a single indexed equality."""

from __future__ import annotations

import datetime as dt
import hashlib
import secrets
import uuid
from collections.abc import Collection

from sqlalchemy import Float, Numeric, bindparam, cast, select, type_coerce, update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.types import NullType

from app.core.clock import utcnow
from app.store.db import Runner
from app.store.driver_statements import DriverStatement
from app.store.models import ApiKey, table_of, unattached

_KEYS = table_of(ApiKey)

KEY_PREFIX = "cg_"
# last_used_at is refreshed at most this often: not one write per request.
LAST_USED_RESOLUTION = dt.timedelta(seconds=60)


def hash_key(plaintext: str) -> str:
    """The stored form of a key."""
    return hashlib.sha256(plaintext.encode("utf-8", "surrogatepass")).hexdigest()


def new_plaintext_key() -> str:
    """A fresh high-entropy key."""
    return KEY_PREFIX + secrets.token_urlsafe(32)


async def create_key(
    s: AsyncSession, user_id: str, name: str, is_admin: bool = False
) -> tuple[ApiKey, str]:
    """A new key for user_id: the row and the plaintext key (print it once; it is not stored)."""
    plaintext = new_plaintext_key()
    row = ApiKey(
        id=uuid.uuid4(), user_id=user_id, name=name, key_hash=hash_key(plaintext),
        key_prefix=plaintext[:10], is_admin=is_admin is True, created_at=utcnow(),
    )
    s.add(row)
    await s.flush()
    return row, plaintext


#: The live (not revoked) key of a hash (parameter `key_hash`): every authenticated request
#: runs it, as one statement of its own (no transaction around it: one round trip, not three).
_LIVE_KEY = DriverStatement(select(*(
    # a float as the driver gives it: asyncpg's numeric converter needs the cursor's type
    type_coerce(cast(column, Float), NullType()).label(column.name)
    if isinstance(column.type, Numeric) else column
    for column in _KEYS.c)).where(
    _KEYS.c.key_hash == bindparam("key_hash", type_=_KEYS.c.key_hash.type),
    _KEYS.c.revoked_at.is_(None)))
#: A key's last use (parameters `key_id`, `used_at`).
_MARK_USED = DriverStatement(
    update(_KEYS).where(_KEYS.c.id == bindparam("key_id", type_=_KEYS.c.id.type))
    .values(last_used_at=bindparam("used_at", type_=_KEYS.c.last_used_at.type))
    .returning(_KEYS.c.id))


async def live_key(runner: Runner, plaintext: str) -> ApiKey | None:
    """The live (not revoked) key with this plaintext, or None."""
    if not plaintext.startswith(KEY_PREFIX):
        return None
    rows = await _LIVE_KEY.rows(runner, {"key_hash": hash_key(plaintext)})
    return unattached(ApiKey, rows[0]) if rows else None


def use_is_stale(key: ApiKey, now: dt.datetime) -> bool:
    """Whether the key's last_used_at is old enough to be written again."""
    return key.last_used_at is None or now - key.last_used_at >= LAST_USED_RESOLUTION


async def mark_used(runner: Runner, key: ApiKey, now: dt.datetime) -> None:
    """The key's last use is `now`."""
    await _MARK_USED.rows(runner, {"key_id": key.id, "used_at": now})
    key.last_used_at = now


async def revoke_key(s: AsyncSession, key_id: uuid.UUID, *, user_id: str | None = None) -> bool:
    """Revoke a key (only user_id's when given); False when there is no such live key."""
    query = update(ApiKey).where(ApiKey.id == key_id, ApiKey.revoked_at.is_(None))
    if user_id is not None:
        query = query.where(ApiKey.user_id == user_id)
    result = await s.execute(query.values(revoked_at=utcnow()))
    return bool(result.rowcount)  # type: ignore[attr-defined]


async def list_keys(s: AsyncSession, user_id: str | None = None) -> list[ApiKey]:
    """Keys, newest first (one user's when given); revoked keys included, marked by revoked_at."""
    query = select(ApiKey).order_by(ApiKey.created_at.desc(), ApiKey.id)
    if user_id is not None:
        query = query.where(ApiKey.user_id == user_id)
    result = await s.execute(query)
    return list(result.scalars())


async def key_ids(s: AsyncSession) -> list[uuid.UUID]:
    """Every key's id, revoked ones included (what an operator's id prefix is matched
    against: a few rows, an operator's table)."""
    return list((await s.execute(select(ApiKey.id).order_by(ApiKey.id))).scalars())


async def set_budget(
    s: AsyncSession, key_id: uuid.UUID, *, tokens: int | None, cost_usd: float | None
) -> bool:
    """Set (None: remove) a key's daily token and cost budgets; False when no such key."""
    result = await s.execute(update(ApiKey).where(ApiKey.id == key_id).values(
        daily_token_budget=tokens, daily_cost_budget_usd=cost_usd))
    return bool(result.rowcount)  # type: ignore[attr-defined]


async def set_models(s: AsyncSession, key_id: uuid.UUID, models: list[str] | None) -> bool:
    """Limit a key to these models (catalog names; None: every model); False when no such
    key."""
    result = await s.execute(update(ApiKey).where(ApiKey.id == key_id).values(
        allowed_models=models))
    return bool(result.rowcount)  # type: ignore[attr-defined]


async def revoked_among(s: AsyncSession, key_ids: Collection[uuid.UUID]) -> set[uuid.UUID]:
    """Which of these keys are revoked (or gone): one query however many streams are open."""
    if not key_ids:
        return set()
    live = await s.execute(
        select(ApiKey.id).where(ApiKey.id.in_(list(key_ids)), ApiKey.revoked_at.is_(None)))
    return set(key_ids) - set(live.scalars())
