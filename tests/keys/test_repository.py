"""API keys: printed once, stored as a hash, revocable."""

from __future__ import annotations

import hashlib

from sqlalchemy import select, text

from app.keys import repository as api_keys
from app.keys.service import authenticate_key
from app.store.db import Database
from app.store.models import ApiKey


async def test_create_stores_only_the_hash(db: Database) -> None:
    async with db.transaction() as s:
        row, plaintext = await api_keys.create_key(s, "alice", "laptop")
    assert plaintext.startswith("cg_") and len(plaintext) >= 40
    assert row.key_hash == hashlib.sha256(plaintext.encode()).hexdigest()
    async with db.transaction() as s:
        dump = (await s.execute(text("SELECT * FROM api_keys"))).all()
    assert plaintext not in repr(dump)
    assert plaintext[len("cg_"):] not in repr(dump)


async def test_authenticate_and_revoke(db: Database) -> None:
    async with db.transaction() as s:
        alice, alice_key = await api_keys.create_key(s, "alice", "laptop")
        _, admin_key = await api_keys.create_key(s, "root", "ops", is_admin=True)
    assert alice.last_used_at is None
    found = await authenticate_key(db, alice_key)
    admin = await authenticate_key(db, admin_key)
    async with db.transaction() as s:
        assert await api_keys.live_key(s, alice_key + "x") is None
        assert await api_keys.live_key(s, "") is None
        assert await api_keys.live_key(s, "Bearer " + alice_key) is None
        used = await api_keys.live_key(s, alice_key)
    assert found is not None and found.user_id == "alice" and found.is_admin is False
    assert used is not None and used.last_used_at is not None  # written on first use
    assert not api_keys.use_is_stale(used, used.last_used_at)  # not again for a minute
    assert admin is not None and admin.is_admin is True
    async with db.transaction() as s:
        assert await api_keys.revoke_key(s, alice.id, user_id="bob") is False
        assert await api_keys.revoke_key(s, alice.id, user_id="alice") is True
        assert await api_keys.revoke_key(s, alice.id) is False
    assert await authenticate_key(db, alice_key) is None
    async with db.transaction() as s:
        keys = await api_keys.list_keys(s, "alice")
        everyone = await api_keys.list_keys(s)
        stored = (await s.execute(select(ApiKey).where(ApiKey.id == alice.id))).scalar_one()
    assert [k.id for k in keys] == [alice.id] and keys[0].revoked_at is not None
    assert len(everyone) == 2
    assert stored.last_used_at is not None
