"""The conversation as a tree over the native API, on both databases: Regenerate makes a new
answer beside the old one, Edit a new question beside the old one with answers of its own;
nothing is deleted; the model is shown the branch of the new version only; .../show moves
the branch back; the messages API gives the current branch, `?tree=true` every version."""

from __future__ import annotations

from typing import Any

import httpx

from tests.e2e.helpers import keyed_client, messages, new_thread
from tests.support.gateway import DemoLlm, InProcessGateway, post_turn
from tests.support.gateway.sse import TurnResult, post_stream


async def regenerate(client: httpx.AsyncClient, thread_id: str, answer_id: str,
                     **body: Any) -> TurnResult:
    return await post_stream(
        client, f"/api/threads/{thread_id}/messages/{answer_id}/regenerate", json=body)


async def edit(client: httpx.AsyncClient, thread_id: str, question_id: str,
               content: str) -> TurnResult:
    return await post_stream(client, f"/api/threads/{thread_id}/messages",
                             json={"content": content, "edit_of": question_id})


async def show(client: httpx.AsyncClient, thread_id: str, message_id: str) -> httpx.Response:
    return await client.post(f"/api/threads/{thread_id}/messages/{message_id}/show")


def user_texts_seen(demo: DemoLlm, word: str) -> list[str]:
    """The user messages of the newest model request that mentions `word` (the main call:
    its last message is the question)."""
    for request in reversed(demo.requests(50)):
        said = [m["content"] for m in request["body"]["messages"] if m["role"] == "user"]
        if said and word in said[-1]:
            return said
    raise AssertionError(f"no request asked about {word!r}")


def shape(rows: list[dict[str, Any]]) -> list[tuple[str, str, int, int]]:
    return [(r["role"], r["content"][:12], r["version"], r["versions"]) for r in rows]


async def test_regenerate_adds_an_answer_beside_the_old_one(
    gateway: InProcessGateway, demo_llm: DemoLlm,
) -> None:
    async with await keyed_client(gateway, "regenerator") as client:
        thread_id = await new_thread(client)
        assert (await post_turn(client, thread_id, "Tell me about walruses")).status_code == 200
        assert (await post_turn(client, thread_id, "And about narwhals?")).status_code == 200
        before = await messages(client, thread_id)
        old_answer = before[3]

        again = await regenerate(client, thread_id, old_answer["id"])
        assert again.status_code == 200, again.raw
        start = again.one("message_start")
        assert start["user_message_id"] == before[2]["id"]  # the same question, not a new one
        assert again.one("message_end")["status"] == "complete"
        seen = user_texts_seen(demo_llm, "narwhals")
        after = await messages(client, thread_id)
        tree = await messages(client, thread_id, tree="true")

    # the model was asked the question once, after the earlier exchange
    assert sum("narwhals" in text for text in seen) == 1 and "walruses" in seen[0]
    new_answer = after[3]
    assert [r["id"] for r in after[:3]] == [r["id"] for r in before[:3]]
    assert new_answer["id"] == start["assistant_message_id"] != old_answer["id"]
    assert new_answer["parent_id"] == before[2]["id"]
    assert (new_answer["version"], new_answer["versions"]) == (2, 2)
    assert new_answer["version_ids"] == [old_answer["id"], new_answer["id"]]
    # nothing deleted: the old answer is in the tree, off the branch
    assert len(tree) == 5
    kept = next(r for r in tree if r["id"] == old_answer["id"])
    assert kept["on_branch"] is False and kept["content"] == old_answer["content"]


async def test_showing_a_version_moves_the_branch_and_the_next_turn_follows_it(
    gateway: InProcessGateway, demo_llm: DemoLlm,
) -> None:
    async with await keyed_client(gateway, "switcher") as client:
        thread_id = await new_thread(client)
        await post_turn(client, thread_id, "Describe otters")
        first = (await messages(client, thread_id))[1]
        await regenerate(client, thread_id, first["id"])

        shown = await show(client, thread_id, first["id"])
        assert shown.status_code == 200, shown.text
        branch = shown.json()["messages"]
        assert [r["id"] for r in branch] == [branch[0]["id"], first["id"]]
        assert (branch[1]["version"], branch[1]["versions"]) == (1, 2)
        assert await messages(client, thread_id) == branch  # it stays shown

        # the next question follows the version shown
        assert (await post_turn(client, thread_id, "Where do beavers live?")).status_code == 200
        after = await messages(client, thread_id)
        threads = (await client.get("/api/threads")).json()["threads"]

    assert after[2]["parent_id"] == first["id"] and len(after) == 4
    assert next(t for t in threads if t["id"] == thread_id)["message_count"] == 4


async def test_edit_adds_a_question_beside_the_old_one_with_its_own_answer(
    gateway: InProcessGateway, demo_llm: DemoLlm,
) -> None:
    async with await keyed_client(gateway, "editor") as client:
        thread_id = await new_thread(client)
        await post_turn(client, thread_id, "Name a penguin species")
        await post_turn(client, thread_id, "How tall are puffins?")
        before = await messages(client, thread_id)

        edited = await edit(client, thread_id, before[2]["id"], "How tall are albatrosses?")
        assert edited.status_code == 200, edited.raw
        seen = user_texts_seen(demo_llm, "albatrosses")
        after = await messages(client, thread_id)
        old_branch = (await show(client, thread_id, before[2]["id"])).json()["messages"]

        # an edit of the first question: a new first message, the old thread one version
        root = await edit(client, thread_id, before[0]["id"], "Name a gull species")
        assert root.status_code == 200, root.raw
        rooted = await messages(client, thread_id)
        tree = await messages(client, thread_id, tree="true")

    assert not any("puffins" in text for text in seen) and "penguin" in seen[0]
    assert [r["id"] for r in after[:2]] == [r["id"] for r in before[:2]]
    assert after[2]["content"] == "How tall are albatrosses?"
    assert after[2]["parent_id"] == before[1]["id"]
    assert (after[2]["version"], after[2]["versions"]) == (2, 2)
    assert after[3]["parent_id"] == after[2]["id"] and len(after) == 4
    assert [r["id"] for r in old_branch] == [r["id"] for r in before]
    assert shape(old_branch)[2][2:] == (1, 2)
    assert [r["content"] for r in rooted][:1] == ["Name a gull species"]
    assert len(rooted) == 2 and rooted[0]["parent_id"] is None
    assert (rooted[0]["version"], rooted[0]["versions"]) == (2, 2)
    assert len(tree) == 8  # every message kept


async def test_a_version_of_a_message_that_cannot_have_one_is_a_plain_refusal(
    gateway: InProcessGateway,
) -> None:
    async with await keyed_client(gateway, "refused-versions") as client:
        thread_id = await new_thread(client)
        await post_turn(client, thread_id, "Hello there")
        question, answer = await messages(client, thread_id)
        of_question = await regenerate(client, thread_id, question["id"])
        of_answer = await edit(client, thread_id, answer["id"], "new words")
        not_an_id = await post_stream(client, f"/api/threads/{thread_id}/messages",
                                      json={"content": "x", "edit_of": "nope"})
        unknown = await show(client, thread_id, "00000000-0000-0000-0000-000000000000")
        elsewhere = await new_thread(client)
        foreign = await regenerate(client, elsewhere, answer["id"])
        rows = await messages(client, thread_id, tree="true")

    assert (of_question.status_code, of_question.body["error"]["code"]) == (
        409, "not_regenerable")
    assert (of_answer.status_code, of_answer.body["error"]["code"]) == (409, "not_editable")
    assert (not_an_id.status_code, not_an_id.body["error"]["code"]) == (422, "invalid_edit_of")
    assert unknown.status_code == 404 and foreign.status_code == 404
    assert len(rows) == 2  # nothing stored by a refusal
