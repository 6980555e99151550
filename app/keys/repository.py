"""API keys: `cg_` + 256 random bits, shown once; only the sha256 of the key is stored.
A fast hash is enough for a high-entropy token (nothing to brute-force), and it makes the
lookup a single indexed equality."""

from __future__ import annotations

import datetime as dt
import hashlib
import secrets
import uuid
from collections.abc import Collection

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from app.core.clock import utcnow
from app.store.models import ApiKey

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


async def authenticate(s: AsyncSession, plaintext: str) -> ApiKey | None:
    """The live (not revoked) key with this plaintext, or None. Updates last_used_at."""
    if not plaintext.startswith(KEY_PREFIX):
        return None
    result = await s.execute(
        select(ApiKey).where(ApiKey.key_hash == hash_key(plaintext), ApiKey.revoked_at.is_(None))
    )
    key = result.scalar_one_or_none()
    if key is None:
        return None
    now = utcnow()
    if key.last_used_at is None or now - key.last_used_at >= LAST_USED_RESOLUTION:
        key.last_used_at = now
        await s.flush()
    return key


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
