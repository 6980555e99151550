"""`scripts/keys.py budget` as an operator runs it: set, shown by `list`, enforced by the
gateway (429 budget_exceeded), cleared; bad input refused with exit 2."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import update

from app.store.db import Database
from app.store.models import ApiKey
from tests.e2e.helpers import new_thread
from tests.scripts.test_keys_cli import create_key, keys_cli, unique
from tests.store.factories import bill, spent
from tests.support.databases import drop_database, make_fresh_database_url
from tests.support.gateway import DemoLlm, same_loop_gateway


async def test_budget_is_set_listed_enforced_and_cleared(
    database_url: str, demo_llm: DemoLlm
) -> None:
    user = unique("carol")
    key_id, key = create_key(database_url, user)
    done = keys_cli(database_url, "budget", key_id, "--tokens", "100", "--cost-usd", "2.5")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "100 tokens / $2.5 a day" in done.stdout
    listed = keys_cli(database_url, "list", "--user", user)
    assert "100 tokens / $2.5 a day" in listed.stdout

    db = Database(database_url)
    try:
        await bill(db, user, spent("demo-1", 100, 0.0))
    finally:
        await db.dispose()
    async with same_loop_gateway(database_url, demo_llm) as gw, gw.client(key) as client:
        thread = await new_thread(client)
        refused = await client.post(f"/api/threads/{thread}/messages", json={"content": "hi"})
        assert refused.status_code == 429
        assert refused.json()["error"]["code"] == "budget_exceeded"
        assert int(refused.headers["retry-after"]) <= 86_400

        assert keys_cli(database_url, "budget", key_id, "--clear").returncode == 0
        assert "a day" not in keys_cli(database_url, "list", "--user", user).stdout
        answer = await client.post(f"/api/threads/{thread}/messages", json={"content": "hi"})
        assert answer.status_code == 200


def test_budget_needs_a_limit_or_clear_and_a_known_key(database_url: str) -> None:
    key_id, _ = create_key(database_url, unique("dave"))
    assert keys_cli(database_url, "budget", key_id).returncode == 2
    assert keys_cli(database_url, "budget", key_id, "--tokens", "5", "--clear").returncode == 2
    assert keys_cli(database_url, "budget", "nope", "--tokens", "5").returncode == 2
    assert keys_cli(database_url, "budget", str(uuid.uuid4()), "--tokens", "5").returncode == 1
    assert keys_cli(database_url, "budget", key_id, "--tokens", "0").returncode == 2


@pytest.fixture
def sqlite_url() -> Iterator[str]:
    url = make_fresh_database_url("sqlite")
    yield url
    drop_database(url)


async def test_a_key_id_prefix_works_when_one_key_has_it_and_is_refused_when_two_do(
    sqlite_url: str,
) -> None:
    """`keys budget 2dbeb552` (the start `list` shows) said "not a key id"."""
    ids = [create_key(sqlite_url, unique("erin"))[0] for _ in range(3)]
    stem = uuid.uuid4().hex[:6]
    twins = [uuid.UUID(f"{stem}aa-0000-4000-8000-{n:012d}") for n in (1, 2)]
    db = Database(sqlite_url)
    try:
        async with db.transaction() as session:
            for old, new in zip(ids[1:], twins, strict=True):
                await session.execute(update(ApiKey).where(ApiKey.id == uuid.UUID(old))
                                      .values(id=new))
    finally:
        await db.dispose()
    done = keys_cli(sqlite_url, "budget", ids[0][:8], "--tokens", "300")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"budget of {ids[0]}: 300 tokens a day" in done.stdout
    ambiguous = keys_cli(sqlite_url, "revoke", stem)
    assert ambiguous.returncode == 2
    assert f"{stem} is the start of 2 key ids ({twins[0]}, {twins[1]}): give more of it" in (
        " ".join(ambiguous.stdout.split()))
    one = keys_cli(sqlite_url, "models", ids[0][:4], "--allow", "fast")
    assert one.returncode == 0 and f"models of {ids[0]}: fast" in one.stdout
    missing = keys_cli(sqlite_url, "revoke", "ffff0000")
    assert missing.returncode == 1 and "no key id starts with ffff0000" in missing.stdout
