"""`scripts/keys.py budget` as an operator runs it: set, shown by `list`, enforced by the
gateway (429 budget_exceeded), cleared; bad input refused with exit 2."""

from __future__ import annotations

import uuid

from app.store.db import Database
from tests.e2e.helpers import new_thread
from tests.scripts.test_keys_cli import create_key, keys_cli, unique
from tests.store.factories import bill, spent
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
