"""The input items list's pages: each order, `limit`, `after` and `before` give the pages an
SDK's pager walks, every item once; a bad query value is a 400 naming its parameter."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest

from app.turn.openai.errors import OpenAIError
from app.turn.openai.responses_items import input_items_page, page_query
from app.turn.stored.response_store import InputItem

AT = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
ITEMS = [InputItem(uuid.UUID(int=i + 1), "user", f"q{i}", AT) for i in range(5)]


def texts(page: dict[str, object]) -> list[str]:
    return [item["content"][0]["text"] for item in page["data"]]  # type: ignore[attr-defined,index]


@pytest.mark.parametrize(("order", "want"), [("desc", ["q4", "q3", "q2", "q1", "q0"]),
                                             ("asc", ["q0", "q1", "q2", "q3", "q4"])])
def test_a_pager_following_last_id_sees_every_item_once_in_order(order: str,
                                                                 want: list[str]) -> None:
    seen: list[str] = []
    after: dict[str, str] = {}
    while True:
        page = input_items_page(ITEMS, page_query({"order": order, "limit": "2", **after}))
        seen += texts(page)
        if not page["has_more"]:
            break
        after = {"after": str(page["last_id"])}
    assert seen == want


def test_before_gives_the_page_just_ahead_of_the_item() -> None:
    ids = [item["id"] for item in input_items_page(ITEMS, page_query({}))["data"]]
    page = input_items_page(ITEMS, page_query({"before": ids[3], "limit": "2"}))
    assert texts(page) == ["q3", "q2"] and page["has_more"] is True
    assert (page["first_id"], page["last_id"]) == (ids[1], ids[2])


def test_no_items_is_an_empty_page() -> None:
    assert input_items_page([], page_query({})) == {
        "object": "list", "data": [], "first_id": None, "last_id": None, "has_more": False}


@pytest.mark.parametrize(("query", "param"), [
    ({"limit": "0"}, "limit"), ({"limit": "101"}, "limit"), ({"limit": "x"}, "limit"),
    ({"order": "up"}, "order"), ({"after": "msg_x", "before": "msg_y"}, "before")])
def test_a_bad_query_value_is_a_400_naming_it(query: dict[str, str], param: str) -> None:
    with pytest.raises(OpenAIError) as refused:
        page_query(query)
    assert (refused.value.status, refused.value.param) == (400, param)


def test_a_cursor_not_in_the_list_is_a_400() -> None:
    with pytest.raises(OpenAIError) as refused:
        input_items_page(ITEMS, page_query({"after": "msg_nope"}))
    assert refused.value.param == "after"
