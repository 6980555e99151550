"""A stored response's own routes with the openai Python SDK: `responses.input_items.list`
(OpenAI's cursor list: what the response was asked with, its ids good as `item_reference`s),
`responses.delete` (the response and its question go, and the thread it made when nothing
else is in it; another user's is 404) and `responses.cancel` (refused as OpenAI refuses a
response that was not created in the background); and the threads stored Responses calls make
stay off the page's list of chats, listed under their own origin."""

from __future__ import annotations

import openai
import pytest

from tests.support.gateway import InProcessGateway
from tests.turn.openai.model_server import ModelServer, answer_body
from tests.turn.openai.test_responses_sdk import chatgate, client_of

MODEL = "scripted-1"


async def test_input_items_list_what_the_response_was_asked(
    oa_gateway: InProcessGateway, model_server: ModelServer
) -> None:
    model_server.bodies["items-1"] = answer_body(["Tides twice a day."])
    model_server.bodies["items-2"] = answer_body(["The moon pulls."])
    async with await client_of(oa_gateway, "input-items") as client:
        first = await client.responses.create(model=MODEL, input="[case:items-1] tides?")
        second = await client.responses.create(model=MODEL, input="[case:items-2] why?",
                                               previous_response_id=first.id)
        items = [item async for item in client.responses.input_items.list(second.id)]
        page = await client.responses.input_items.list(first.id, limit=1, order="asc")
        again = await client.responses.create(model=MODEL, input=[
            {"type": "item_reference", "id": page.data[0].id},
            {"type": "item_reference", "id": first.output[0].id},
            {"role": "user", "content": "[case:items-2] and so?"}])
    assert [(i.type, i.role, i.content[0].text) for i in items] == [  # type: ignore[union-attr]
        ("message", "user", "[case:items-2] why?")]
    assert [i.content[0].text for i in page.data] == [  # type: ignore[union-attr]
        "[case:items-1] tides?"]
    assert (page.first_id, page.last_id, page.has_more) == (page.data[0].id,) * 2 + (False,)
    assert again.output_text == "The moon pulls."
    shown = str(model_server.requests_for("items-2")[-1]["messages"])
    assert "[case:items-1] tides?" in shown and "Tides twice a day." in shown


async def test_input_items_of_another_users_or_no_response_are_404(
    oa_gateway: InProcessGateway, model_server: ModelServer
) -> None:
    model_server.bodies["items-own"] = answer_body(["Mine."])
    async with await client_of(oa_gateway, "items-owner") as owner:
        mine = await owner.responses.create(model=MODEL, input="[case:items-own] hi")
        with pytest.raises(openai.BadRequestError) as bad:
            await owner.responses.input_items.list(mine.id, limit=500)
    assert bad.value.body["param"] == "limit"  # type: ignore[index]
    async with await client_of(oa_gateway, "items-other") as other:
        for response_id in (mine.id, "resp_nope"):
            with pytest.raises(openai.NotFoundError):
                await other.responses.input_items.list(response_id)


async def test_delete_takes_the_response_and_the_thread_it_made(
    oa_gateway: InProcessGateway, model_server: ModelServer
) -> None:
    model_server.bodies["del-1"] = answer_body(["First."])
    model_server.bodies["del-2"] = answer_body(["Second."])
    user = "responses-delete"
    async with await client_of(oa_gateway, user) as client:
        first = await client.responses.create(model=MODEL, input="[case:del-1] one")
        second = await client.responses.create(model=MODEL, input="[case:del-2] two",
                                               previous_response_id=first.id)
        thread_id = chatgate(first)["thread_id"]
        async with await client_of(oa_gateway, "responses-not-owner") as other:
            with pytest.raises(openai.NotFoundError):
                await other.responses.delete(first.id)
        assert await client.responses.delete(second.id) is None  # the SDK returns nothing
        with pytest.raises(openai.NotFoundError):
            await client.responses.retrieve(second.id)
        assert (await client.responses.retrieve(first.id)).output_text == "First."
        async with oa_gateway.client(await oa_gateway.api_key(user)) as native:
            rows = (await native.get(f"/api/threads/{thread_id}/messages")).json()["messages"]
            assert [r["content"] for r in rows] == ["[case:del-1] one", "First."]
            raw = await native.delete(f"/v1/responses/{first.id}")
            assert (raw.status_code, raw.json()) == (
                200, {"id": first.id, "object": "response", "deleted": True})
            assert (await native.get(f"/api/threads/{thread_id}/messages")).status_code == 404
        with pytest.raises(openai.NotFoundError):
            await client.responses.delete(first.id)


async def test_going_on_from_an_earlier_response_branches_the_thread(
    oa_gateway: InProcessGateway, model_server: ModelServer
) -> None:
    """Two calls that go on from the same response are two versions of the next exchange:
    each is shown its own branch only, the thread keeps both, and the page shows the
    newest one's branch."""
    for case, words in (("fork-1", "Seals."), ("fork-2", "Sea lions."), ("fork-3", "Orcas."),
                        ("fork-4", "Krill.")):
        model_server.bodies[case] = answer_body([words])
    user = "responses-fork"
    async with await client_of(oa_gateway, user) as client:
        first = await client.responses.create(model=MODEL, input="[case:fork-1] grey animal?")
        second = await client.responses.create(model=MODEL, input="[case:fork-2] louder one?",
                                               previous_response_id=first.id)
        third = await client.responses.create(model=MODEL, input="[case:fork-3] bigger one?",
                                              previous_response_id=first.id)
        fourth = await client.responses.create(model=MODEL, input="[case:fork-4] its food?",
                                               previous_response_id=third.id)
        assert await client.responses.delete(second.id) is None
        items = [i async for i in client.responses.input_items.list(fourth.id)]
        thread_id = chatgate(first)["thread_id"]
        async with oa_gateway.client(await oa_gateway.api_key(user)) as native:
            rows = (await native.get(f"/api/threads/{thread_id}/messages")).json()["messages"]
    shown = str(model_server.requests_for("fork-4")[-1]["messages"])
    assert "Seals." in shown and "Orcas." in shown and "louder" not in shown
    assert "Sea lions." not in str(model_server.requests_for("fork-3")[-1]["messages"])
    assert [i.content[0].text for i in items] == [  # type: ignore[union-attr]
        "[case:fork-4] its food?"]
    assert [r["content"] for r in rows] == [
        "[case:fork-1] grey animal?", "Seals.", "[case:fork-3] bigger one?", "Orcas.",
        "[case:fork-4] its food?", "Krill."]


async def test_cancel_is_refused_as_for_a_response_not_in_the_background(
    oa_gateway: InProcessGateway, model_server: ModelServer
) -> None:
    model_server.bodies["cancel"] = answer_body(["Done already."])
    async with await client_of(oa_gateway, "responses-cancel") as client:
        done = await client.responses.create(model=MODEL, input="[case:cancel] hi")
        with pytest.raises(openai.BadRequestError) as refused:
            await client.responses.cancel(done.id)
        assert refused.value.body == {"message": "Cannot cancel a synchronous response.",
                                      "type": "invalid_request_error", "param": None,
                                      "code": None}
        assert (await client.responses.retrieve(done.id)).status == "completed"
        with pytest.raises(openai.NotFoundError):
            await client.responses.cancel("resp_" + "0" * 32)


async def test_a_responses_thread_is_not_among_the_pages_chats(
    oa_gateway: InProcessGateway, model_server: ModelServer
) -> None:
    model_server.bodies["origin"] = answer_body(["From the SDK."])
    user = "responses-origin"
    async with await client_of(oa_gateway, user) as client:
        made = await client.responses.create(model=MODEL, input="[case:origin] hi")
    async with oa_gateway.client(await oa_gateway.api_key(user)) as native:
        chat = (await native.post("/api/threads", json={"title": "my chat"})).json()["id"]

        async def listed(**params: str) -> list[tuple[str, str]]:
            answer = await native.get("/api/threads", params=params)
            assert answer.status_code == 200, answer.text
            return sorted((t["id"], t["origin"]) for t in answer.json()["threads"])

        sdk = (chatgate(made)["thread_id"], "responses")
        assert await listed() == [(chat, "chat")]  # what the page shows
        assert await listed(origin="responses") == [sdk]
        assert await listed(origin="all") == sorted([(chat, "chat"), sdk])
        assert await listed(origin="responses", q="hi") == [sdk]
        refused = await native.get("/api/threads", params={"origin": "sdk"})
        assert (refused.status_code, refused.json()["error"]["code"]) == (422, "invalid_query")
