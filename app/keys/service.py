"""Who is calling: an API key's holder, the question every authenticated request asks.

The handler only parses the `Authorization` header and renders a 401; looking the key up is
one statement of its own here (and refreshing its last_used_at, a write, another, at most
once a minute), so the API layer never opens a session or touches a key row.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from app.core.clock import utcnow
from app.keys import repository as api_keys
from app.store.db import Database


@dataclass(frozen=True, slots=True)
class Principal:
    """The caller a request acts for, and the daily budget of the key it came with (None:
    no budget; auth mode `off` has none)."""

    user_id: str
    is_admin: bool
    #: The key the request authenticated with (None with auth mode `off`): open streams are
    #: ended when it is revoked.
    key_id: uuid.UUID | None = None
    daily_token_budget: int | None = None
    daily_cost_budget_usd: float | None = None
    #: The models (catalog names) the key may use; None: every model.
    allowed_models: tuple[str, ...] | None = None


async def authenticate_key(db: Database, token: str) -> Principal | None:
    """The holder of a live key with this plaintext, or None for an unknown, malformed or
    revoked key (the caller answers all three alike: the answer must not help guessing)."""
    async with db.one_statement(read_only=True) as runner:
        key = await api_keys.live_key(runner, token)
    if key is None:
        return None
    now = utcnow()
    if api_keys.use_is_stale(key, now):  # once a minute at most: not a write per request
        async with db.one_statement() as runner:
            await api_keys.mark_used(runner, key, now)
    return Principal(key.user_id, key.is_admin, key.id, key.daily_token_budget,
                     key.daily_cost_budget_usd,
                     tuple(key.allowed_models) if key.allowed_models is not None else None)
