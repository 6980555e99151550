"""Which item ids the gateway takes as its own: the ones its Responses renderer mints (a
message's and a reasoning item's, an index only past the first; a function call's, always
with its index), nothing else (the endpoint's tests: tests/turn/openai/test_item_references)."""

from __future__ import annotations

import uuid

import pytest

from app.turn.stored.item_references import ItemReference, parse_item_id

HEX = uuid.UUID(int=0xBEEF).hex


@pytest.mark.parametrize(("raw", "kind", "index"), [
    (f"msg_{HEX}", "message", 0), (f"rs_{HEX}", "reasoning", 0),
    (f"msg_{HEX}_2", "message", 2), (f"fc_{HEX}_0", "function_call", 0),
    (f"fc_{HEX}_3", "function_call", 3)])
def test_a_minted_id_names_its_message_and_item(raw: str, kind: str, index: int) -> None:
    assert parse_item_id(raw) == ItemReference(raw, kind, uuid.UUID(int=0xBEEF), index)


@pytest.mark.parametrize("raw", [
    f"fc_{HEX}", f"msg_{HEX.upper()}", f"resp_{HEX}", "msg_abc", f"msg_{HEX}_", f"msg_{HEX}x",
    f"ws_{HEX}", ""])
def test_any_other_id_is_none_of_ours(raw: str) -> None:
    assert parse_item_id(raw) is None
