"""`item_reference` inputs of /v1/responses, with the openai Python SDK: an earlier stored
response's items sent back by id resolve to what the gateway stored, the message to its clean
text, the reasoning to nothing (thinking is never sent back to the model), a function call to
the call; another user's item, or an id the gateway never minted, is a 400 naming the item."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from tests.support.gateway import InProcessGateway
from tests.turn.openai.model_server import ModelServer, answer_body
from tests.turn.openai.test_responses_sdk import TOOLS, client_of
from tests.turn.openai.test_sdk import tool_call_body

MODEL = "scripted-1"
#: A marker the filter takes out of the answer: it must not come back with the reference.
RAW = 'Paris is the capital. <!-- METADATA: {"sources": ["https://example.org/raw"]} -->'


def sent(model_server: ModelServer, key: str) -> str:
    """Everything the model server was sent for the tag's latest call, as one text."""
    return json.dumps(model_server.requests_for(key)[-1]["messages"])


def ref(item_id: str) -> dict[str, Any]:
    return {"type": "item_reference", "id": item_id}


async def test_a_referenced_answer_is_its_clean_text_and_its_reasoning_is_not_sent(
    oa_gateway: InProcessGateway, model_server: ModelServer
) -> None:
    model_server.bodies["ref-1"] = answer_body(["<think>secret plan</think>", RAW])
    model_server.bodies["ref-2"] = answer_body(["Lyon is second."])
    async with await client_of(oa_gateway, "item-refs") as client:
        first = await client.responses.create(model=MODEL, input="[case:ref-1] capital?")
        kinds = [item.type for item in first.output]
        assert kinds == ["reasoning", "message"]
        second = await client.responses.create(model=MODEL, input=[
            {"role": "user", "content": "[case:ref-1] capital?"},
            *[ref(item.id) for item in first.output],
            {"role": "user", "content": "[case:ref-2] and the second city?"}])
    assert second.output_text == "Lyon is second."
    history = sent(model_server, "ref-2")
    assert "Paris is the capital." in history
    assert "example.org/raw" not in history and "secret plan" not in history


async def test_a_referenced_function_call_is_the_call_its_output_answers(
    oa_gateway: InProcessGateway, model_server: ModelServer
) -> None:
    model_server.bodies["ref-tool"] = tool_call_body()
    model_server.bodies["ref-tool.after-tool"] = answer_body(["Sunny in Brno."])
    async with await client_of(oa_gateway, "item-refs-tool") as client:
        first = await client.responses.create(model=MODEL, input="[case:ref-tool] Brno?",
                                              tools=TOOLS)
        [call] = first.output
        assert call.type == "function_call" and call.id.startswith("fc_")
        second = await client.responses.create(model=MODEL, tools=TOOLS, input=[
            {"role": "user", "content": "[case:ref-tool] Brno?"}, ref(call.id),
            {"type": "function_call_output", "call_id": call.call_id,
             "output": '{"sky": "sunny"}'}])
    assert second.output_text == "Sunny in Brno."
    messages = model_server.requests_for("ref-tool")[-1]["messages"]
    assert messages[-2]["tool_calls"][0]["id"] == messages[-1]["tool_call_id"] == call.call_id
    assert messages[-2]["tool_calls"][0]["function"] == {
        "name": "get_weather", "arguments": '{"city": "Brno"}'}


@pytest.mark.parametrize("whose", ["another user's", "unknown", "not minted here"])
async def test_an_item_not_of_this_user_is_a_400_naming_it(
    oa_gateway: InProcessGateway, model_server: ModelServer, whose: str
) -> None:
    model_server.bodies["ref-owner"] = answer_body(["Mine."])
    async with await client_of(oa_gateway, "item-owner") as owner:
        first = await owner.responses.create(model=MODEL, input="[case:ref-owner] hi")
    item_id = {"another user's": first.output[0].id,
               "unknown": "msg_" + "0" * 32, "not minted here": "msg_abc"}[whose]
    async with await client_of(oa_gateway, "item-thief") as thief:
        with pytest.raises(openai.BadRequestError) as refused:
            await thief.responses.create(model=MODEL, input=[
                {"role": "user", "content": "[case:ref-owner] hi"}, ref(item_id),
                {"role": "user", "content": "[case:ref-owner] again"}])
    error = refused.value.body
    assert isinstance(error, dict)
    assert error["message"] == f"Item with id '{item_id}' not found."
    assert error["param"] == "input[1].id"
    assert refused.value.code == "item_not_found"
