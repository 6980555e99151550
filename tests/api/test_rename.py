"""PATCH /api/threads/{id} {"title": ...}: rename a thread, with precise 422s and nothing
changed by a refused request."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.e2e.helpers import keyed_client, new_thread
from tests.support.gateway import LiveGateway


async def titles(client: httpx.AsyncClient) -> dict[str, str | None]:
    response = await client.get("/api/threads")
    return {t["id"]: t["title"] for t in response.json()["threads"]}


async def test_rename_sets_the_trimmed_title(gateway: LiveGateway) -> None:
    async with await keyed_client(gateway, "renamer") as client:
        thread_id = await new_thread(client)
        response = await client.patch(f"/api/threads/{thread_id}", json={"title": "  Tides  "})
        assert response.status_code == 200, response.text
        assert response.json()["id"] == thread_id and response.json()["title"] == "Tides"
        assert set(response.json()) == {"id", "title", "autonomy"}
        assert (await titles(client))[thread_id] == "Tides"


@pytest.mark.parametrize(
    "title", ["", "   \n", "x" * 201, 42, None, ["a"], {"text": "a"}],
    ids=["empty", "blank", "too-long", "number", "null", "list", "object"],
)
async def test_a_bad_title_is_refused_and_changes_nothing(
    gateway: LiveGateway, title: Any
) -> None:
    async with await keyed_client(gateway, "renamer") as client:
        thread_id = await new_thread(client)
        await client.patch(f"/api/threads/{thread_id}", json={"title": "Before"})
        response = await client.patch(f"/api/threads/{thread_id}", json={"title": title})
        assert response.status_code == 422, response.text
        assert response.json()["error"]["code"] == "invalid_title"
        assert (await titles(client))[thread_id] == "Before"


async def test_the_longest_title_is_accepted(gateway: LiveGateway) -> None:
    async with await keyed_client(gateway, "renamer") as client:
        thread_id = await new_thread(client)
        response = await client.patch(f"/api/threads/{thread_id}", json={"title": "é" * 200})
        assert response.status_code == 200 and response.json()["title"] == "é" * 200


async def test_title_and_autonomy_change_together_or_not_at_all(gateway: LiveGateway) -> None:
    async with await keyed_client(gateway, "renamer") as client:
        thread_id = await new_thread(client)
        refused = await client.patch(f"/api/threads/{thread_id}",
                                     json={"title": "New", "autonomy": {"idle_seconds": 0}})
        assert refused.status_code == 422
        assert refused.json()["error"]["code"] == "invalid_autonomy"
        assert (await titles(client))[thread_id] is None
        both = await client.patch(f"/api/threads/{thread_id}",
                                  json={"title": "New", "autonomy": {"max_followups": 2}})
        assert both.status_code == 200, both.text
        assert both.json()["title"] == "New" and both.json()["autonomy"]["max_followups"] == 2


async def test_nothing_to_change_and_unknown_fields_are_refused(gateway: LiveGateway) -> None:
    async with await keyed_client(gateway, "renamer") as client:
        thread_id = await new_thread(client)
        for body in ({}, {"name": "x"}, {"title": "x", "colour": "red"}):
            response = await client.patch(f"/api/threads/{thread_id}", json=body)
            assert response.status_code == 422, body
            assert response.json()["error"]["code"] == "invalid_field"


async def test_another_users_thread_is_not_found(gateway: LiveGateway) -> None:
    async with await keyed_client(gateway, "owner") as owner, \
            await keyed_client(gateway, "stranger") as stranger:
        thread_id = await new_thread(owner)
        response = await stranger.patch(f"/api/threads/{thread_id}", json={"title": "Mine"})
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "not_found"
        assert (await titles(owner))[thread_id] is None
