"""A stored response's input as OpenAI's cursor list (`GET /v1/responses/{id}/input_items`),
and the object a deleted response answers with. The list's query: `order` (`desc`, the
default, newest first; or `asc`), `limit` (1 to 100, default 20), `after` / `before` (an
item id of the list: the items past it, or just before it, in that order); the page says
`first_id`, `last_id` and `has_more`, which the SDKs' pagers follow."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from app.turn.openai.errors import invalid
from app.turn.stored.response_store import InputItem

DEFAULT_LIMIT, MAX_LIMIT = 20, 100


@dataclass(frozen=True)
class PageQuery:
    order: str
    limit: int
    after: str | None
    before: str | None


def page_query(params: Mapping[str, str]) -> PageQuery:
    """The list's query, each bad value a 400 naming its parameter."""
    order = params.get("order", "desc")
    if order not in ("asc", "desc"):
        raise invalid("'order' must be 'asc' or 'desc'", "order")
    raw = params.get("limit", str(DEFAULT_LIMIT))
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_LIMIT:
        raise invalid(f"'limit' must be an integer from 1 to {MAX_LIMIT}", "limit")
    after, before = params.get("after"), params.get("before")
    if after is not None and before is not None:
        raise invalid("give 'after' or 'before', not both", "before")
    return PageQuery(order, int(raw), after, before)


def input_item(item: InputItem) -> dict[str, Any]:
    """A stored message as the Responses API's input message item; its id can be sent back
    as an `item_reference`."""
    return {"id": f"msg_{item.id.hex}", "type": "message", "role": item.role,
            "status": "completed",
            "content": [{"type": "input_text", "text": item.content}]}


def input_items_page(items: list[InputItem], query: PageQuery) -> dict[str, Any]:
    """One page of the response's input items, in the query's order."""
    shown = [input_item(item) for item in items]
    if query.order == "desc":
        shown.reverse()
    ids = [item["id"] for item in shown]
    cursor = query.after or query.before
    if cursor is not None and cursor not in ids:
        param = "after" if query.after is not None else "before"
        raise invalid(f"No input item with id '{cursor}' in this response", param)
    if query.before is not None:
        earlier = shown[:ids.index(query.before)]
        page, more = earlier[-query.limit:], len(earlier) > query.limit
    else:
        later = shown[ids.index(query.after) + 1:] if query.after is not None else shown
        page, more = later[:query.limit], len(later) > query.limit
    return {"object": "list", "data": page,
            "first_id": page[0]["id"] if page else None,
            "last_id": page[-1]["id"] if page else None, "has_more": more}


def deleted(response_id: str) -> dict[str, Any]:
    return {"id": response_id, "object": "response", "deleted": True}
