"""The output items a Responses client sends back by id (`{"type": "item_reference", "id"}`),
read from the store: the Vercel AI SDK's default provider sends an earlier answer's message,
reasoning and function calls this way whenever `store` is on (its `useChat` history, every
multi-step tool loop).

    refs = [parse_item_id(raw)...]                      # None: no id this gateway minted
    items = await resolve_items(db, user_id, refs)      # raises ItemNotFound

The ids are the ones the Responses renderer mints from a stored message's id: `msg_<hex>`
for a message (an answer's clean text, or a question), `rs_<hex>` for an answer's reasoning,
`fc_<hex>_<n>` for its n-th function call. A reasoning item resolves to nothing: thinking is
never sent back to the model. Only the key's own user's messages resolve; another user's id
reads as unknown."""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from typing import Any

from app.store.db import Database
from app.threads import repository as thread_store

_ITEM_ID = re.compile(r"(msg|rs|fc)_([0-9a-f]{32})(?:_([0-9]{1,4}))?")
_KINDS = {"msg": "message", "rs": "reasoning", "fc": "function_call"}


@dataclass(frozen=True)
class ItemReference:
    """A parsed item id: which kind of item, of which stored message, which one of them."""

    id: str
    kind: str
    message_id: uuid.UUID
    index: int


@dataclass(frozen=True)
class ResolvedItem:
    """What a referenced item puts into the conversation: a message (`role`, `content`), a
    function call (`call`, in the chat shape), or nothing (a reasoning item)."""

    role: str | None = None
    content: str = ""
    call: dict[str, Any] | None = None


class ItemNotFound(Exception):
    """An item id that names nothing of this user's."""

    def __init__(self, item_id: str) -> None:
        super().__init__(item_id)
        self.item_id = item_id


def parse_item_id(raw: str) -> ItemReference | None:
    """The reference an id makes, or None for an id this gateway never mints."""
    match = _ITEM_ID.fullmatch(raw)
    if match is None:
        return None
    kind = _KINDS[match[1]]
    index = int(match[3] or 0)
    if kind == "function_call" and match[3] is None:
        return None  # a call's id always has its index, the others only past the first
    return ItemReference(raw, kind, uuid.UUID(hex=match[2]), index)


async def resolve_items(db: Database, user_id: str, refs: list[ItemReference]
                        ) -> dict[str, ResolvedItem]:
    """Each reference's item, read in one transaction; ItemNotFound for the first that names
    no message of this user's (or an item that message does not have)."""
    resolved: dict[str, ResolvedItem] = {}
    async with db.transaction(read_only=True) as session:
        for ref in refs:
            message = await thread_store.get_message(session, user_id, ref.message_id)
            item = None if message is None else _item(ref, message.role, message.content,
                                                       dict(message.meta or {}))
            if item is None:
                raise ItemNotFound(ref.id)
            resolved[ref.id] = item
    return resolved


def _item(ref: ItemReference, role: str, content: str, meta: dict[str, Any]
          ) -> ResolvedItem | None:
    if ref.kind == "message":
        return ResolvedItem(role=role, content=content) if ref.index == 0 else None
    if role != "assistant":
        return None
    if ref.kind == "reasoning":
        return ResolvedItem() if ref.index == 0 else None
    calls = meta.get("tool_calls") or []
    if ref.index >= len(calls) or not isinstance(calls[ref.index], dict):
        return None
    call = {"type": "function", **calls[ref.index]}
    if not call.get("id"):  # the call_id the renderer showed when the model server gave none
        call["id"] = f"call_{ref.message_id.hex}_{ref.index}"
    return ResolvedItem(call=call)
