"""A NUL (U+0000) in a thread's title is refused as one in a message's content is (422, the
same sentence), wherever a title comes in: a new thread, a rename, a rename together with an
autonomy change. Nothing is stored: no thread, no title shortened behind the writer's back,
no autonomy change."""

from __future__ import annotations

from typing import Any

import httpx

from tests.e2e.helpers import keyed_client, new_thread
from tests.support.gateway import LiveGateway

REFUSED = {"code": "invalid_title",
           "message": "'title' must not contain NUL (U+0000) characters"}


async def threads(client: httpx.AsyncClient) -> dict[str, str | None]:
    response = await client.get("/api/threads")
    return {t["id"]: t["title"] for t in response.json()["threads"]}


def refused(response: httpx.Response) -> Any:
    assert response.status_code == 422, response.text
    return response.json()["error"]


async def test_a_new_thread_with_a_nul_in_its_title_is_refused(gateway: LiveGateway) -> None:
    async with await keyed_client(gateway, "nul-titler") as client:
        response = await client.post("/api/threads", json={"title": "Trip\x00plans"})
        assert refused(response) == REFUSED
        assert await threads(client) == {}


async def test_a_rename_with_a_nul_is_refused_and_changes_nothing(gateway: LiveGateway) -> None:
    async with await keyed_client(gateway, "nul-renamer") as client:
        thread_id = await new_thread(client, "Before")
        alone = await client.patch(f"/api/threads/{thread_id}", json={"title": "\x00After"})
        both = await client.patch(f"/api/threads/{thread_id}", json={
            "title": "After\x00", "autonomy": {"enabled": True, "max_followups": 3}})
        assert refused(alone) == refused(both) == REFUSED
        assert (await threads(client))[thread_id] == "Before"
        later = await client.patch(f"/api/threads/{thread_id}", json={"title": "Later"})
        assert later.status_code == 200 and later.json()["autonomy"]["max_followups"] != 3
