"""Every list of models a key is shown holds the models it may use, and no other: the openai
SDK's `models.list()` and `models.retrieve()` on /v1, and the page's GET /api/models. A key
limited to some models sees those; a model it may not use is not found, as an unknown one
is not (OpenAI's 404 `model_not_found`); a key with no limit sees every listed model."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from tests.support.gateway import InProcessGateway
from tests.support.http import sdk

#: The module's gateway offers these, in this order (tests/turn/openai/conftest.py).
OFFERED = ["scripted-1", "other-1"]


def client_of(gateway: InProcessGateway, key: str) -> openai.AsyncOpenAI:
    return sdk(gateway.url + "/v1", key)


async def not_found(client: openai.AsyncOpenAI, name: str) -> Any:
    """The error body of retrieving `name`, which must be OpenAI's 404 `model_not_found`."""
    with pytest.raises(openai.NotFoundError) as raised:
        await client.models.retrieve(name)
    assert raised.value.code == "model_not_found"
    return raised.value.body


async def test_a_limited_key_lists_and_finds_only_the_models_it_may_use(
    oa_gateway: InProcessGateway,
) -> None:
    key = await oa_gateway.api_key("lists-limited", models=["other-1"])
    async with client_of(oa_gateway, key) as client:
        listed = [m.id async for m in client.models.list()]
        found = await client.models.retrieve("other-1")
        forbidden = await not_found(client, "scripted-1")
        unknown = await not_found(client, "gpt-9")
    async with oa_gateway.client(key) as native:
        page = (await native.get("/api/models")).json()
    assert listed == ["other-1"]
    assert found.id == "other-1"
    # told apart from an unknown model by nothing but its name
    assert forbidden == {**unknown, "message": "The model 'scripted-1' does not exist"}
    assert page == {"models": [{"name": "other-1"}], "default": "other-1"}


async def test_a_key_without_a_limit_lists_and_finds_every_model(
    oa_gateway: InProcessGateway,
) -> None:
    key = await oa_gateway.api_key("lists-all")
    async with client_of(oa_gateway, key) as client:
        listed = [m.id async for m in client.models.list()]
        found = [(await client.models.retrieve(name)).id for name in OFFERED]
        await not_found(client, "gpt-9")
    async with oa_gateway.client(key) as native:
        page = (await native.get("/api/models")).json()
    assert listed == found == OFFERED
    assert page == {"models": [{"name": name} for name in OFFERED], "default": "scripted-1"}
