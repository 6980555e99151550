"""app.keys.service on both backends: a key's holder, or None for anything else."""

from __future__ import annotations

from sqlalchemy import select

from app.keys import repository as api_keys
from app.keys.service import Principal, authenticate_key
from app.store.db import Database
from app.store.models import ApiKey


async def test_a_live_key_is_its_holder_and_nothing_else_is_anyone(db: Database) -> None:
    async with db.transaction() as s:
        alice, alice_key = await api_keys.create_key(s, "alice", "laptop")
        root, admin_key = await api_keys.create_key(s, "root", "ops", is_admin=True)
        await api_keys.set_budget(s, root.id, tokens=1000, cost_usd=2.5)
    assert await authenticate_key(db, alice_key) == Principal(
        "alice", is_admin=False, key_id=alice.id)
    assert await authenticate_key(db, admin_key) == Principal(
        "root", is_admin=True, key_id=root.id, daily_token_budget=1000,
        daily_cost_budget_usd=2.5)
    for wrong in (alice_key + "x", "", "Bearer " + alice_key, "not-a-key"):
        assert await authenticate_key(db, wrong) is None
    async with db.transaction() as s:
        stored = (await s.execute(select(ApiKey).where(ApiKey.id == alice.id))).scalar_one()
        assert stored.last_used_at is not None  # the lookup was committed
        await api_keys.revoke_key(s, alice.id)
    assert await authenticate_key(db, alice_key) is None
