"""Every lookup is scoped by user: another user's thread answers exactly like a missing one."""

from __future__ import annotations

import uuid

from tests.e2e.helpers import keyed_client, messages, new_thread
from tests.support.gateway import LiveGateway, post_turn


async def test_foreign_thread_is_indistinguishable_from_a_missing_one(
    gateway: LiveGateway,
) -> None:
    async with await keyed_client(gateway, "alice") as alice, \
            await keyed_client(gateway, "bob") as bob:
        thread_id = await new_thread(alice, "alice's secrets")
        result = await post_turn(alice, thread_id, "my secret")
        assert result.one("message_end")["status"] == "complete"
        missing = str(uuid.uuid4())

        for path, method, body in [
            ("/api/threads/{}/messages", "GET", None),
            ("/api/threads/{}/messages?include_synthetic=true", "GET", None),
            ("/api/threads/{}/messages", "POST", {"content": "let me in"}),
            ("/api/threads/{}", "DELETE", None),
        ]:
            foreign = await bob.request(method, path.format(thread_id), json=body)
            absent = await bob.request(method, path.format(missing), json=body)
            assert foreign.status_code == absent.status_code == 404
            assert foreign.json() == absent.json()
            assert foreign.headers["content-type"] == absent.headers["content-type"]

        assert (await bob.get("/api/threads")).json() == {"threads": []}
        # alice's thread is untouched by bob's attempts
        rows = await messages(alice, thread_id)
        assert [r["content"] for r in rows if r["role"] == "user"] == ["my secret"]
        listed = (await alice.get("/api/threads")).json()["threads"]
        assert [t["id"] for t in listed] == [thread_id]
        assert listed[0]["preview"]


async def test_delete_removes_the_thread_for_its_owner(gateway: LiveGateway) -> None:
    async with await keyed_client(gateway, "tidy") as client:
        thread_id = await new_thread(client)
        await post_turn(client, thread_id, "soon gone")
        deleted = await client.delete(f"/api/threads/{thread_id}")
        assert deleted.status_code == 204 and deleted.content == b""
        gone = await client.get(f"/api/threads/{thread_id}/messages")
        assert gone.status_code == 404
        assert (await client.delete(f"/api/threads/{thread_id}")).status_code == 404
