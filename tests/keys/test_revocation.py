"""The revocation watcher: one query for every key with open streams, none without."""

from __future__ import annotations

from app.keys import repository as api_keys
from app.keys.revocation import RevocationWatcher
from app.store.db import Database


async def test_only_the_streams_of_revoked_keys_are_ended(db: Database) -> None:
    async with db.transaction() as s:
        kept, _ = await api_keys.create_key(s, "alice", "laptop")
        lost, _ = await api_keys.create_key(s, "alice", "phone")
    watcher = RevocationWatcher(db, interval_s=2.0)
    assert await watcher.check_once() == 0  # no stream open: no query
    ended: list[str] = []
    with watcher.stream(kept.id, lambda: ended.append("safe")), \
            watcher.stream(lost.id, lambda: ended.append("one")), \
            watcher.stream(lost.id, lambda: ended.append("two")), \
            watcher.stream(None, lambda: ended.append("keyless")):
        assert await watcher.check_once() == 0
        async with db.transaction() as s:
            await api_keys.revoke_key(s, lost.id)
        assert await watcher.check_once() == 2
        assert sorted(ended) == ["one", "two"]
        assert await watcher.check_once() == 0  # ended streams are not called twice
        assert sorted(ended) == ["one", "two"]
