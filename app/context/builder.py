"""Builds the single user message sent upstream: `<!-- MSG_CONTEXT: {json} -->`, a newline,
then the user's text. The JSON is made marker-proof by writing `<`, `>` and `&` as `\\u003c`,
`\\u003e`, `\\u0026`: outside strings JSON never contains those characters, so escaping them in
the encoded text changes no value, and no `-->` or `<!--` can appear inside the block.

The user's text after the block is plain text, not JSON, so it gets the plain-text form of the
same guard: every `<!--` is written `&lt;!--`. Every marker header starts with a literal
`<!--`, so no spelling the grammar allows (any case, white space or newlines, no colon) can
open a second, forged block, while the model still reads the comment the user wrote."""

from __future__ import annotations

import datetime
import functools
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson


@dataclass(frozen=True)
class ContextItem:
    """One earlier message as the model sees it."""

    role: str
    content: str
    time: datetime.datetime

    def as_json(self) -> dict[str, str]:
        return {"role": self.role, "content": self.content, "time": _iso(self.time)}

    @functools.cached_property
    def encoded(self) -> str:
        """The item's escaped JSON, encoded once: a turn asks for each item's size more than
        once (the context window, memory recall's window) and then writes it into the
        marker, and a long thread has hundreds of items."""
        return encode_context_json(self.as_json())

    @property
    def encoded_chars(self) -> int:
        """Characters the item adds to the encoded history: its escaped JSON plus a comma."""
        return len(self.encoded) + 1


def _iso(moment: datetime.datetime) -> str:
    return moment.astimezone(datetime.UTC).isoformat().replace("+00:00", "Z")


def encode_context_json(value: dict[str, Any] | str) -> str:
    """Compact JSON with `<`, `>`, `&` escaped, so the text cannot end or open a marker.

    orjson writes what `json.dumps(ensure_ascii=False, separators=(",", ":"))` writes, the
    same escapes included, at an eighth of its CPU, and three replaces cost less than one
    translate: a long thread's marker is some 12,000 characters a turn. A text orjson refuses
    (a lone surrogate, which a database can hold) takes the standard library's way."""
    try:
        text = orjson.dumps(value).decode()
    except orjson.JSONEncodeError:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def select_within_budget(items: Sequence[ContextItem], budget_chars: int) -> list[ContextItem]:
    """The newest items whose encoded size fits the budget, oldest first.

    Whole messages only: the walk goes from newest to oldest and stops at the first message
    that no longer fits, so the model never sees a gap in the middle of the conversation."""
    kept: list[ContextItem] = []
    used = 0
    for item in reversed(items):
        cost = item.encoded_chars
        if used + cost > budget_chars:
            break
        kept.append(item)
        used += cost
    kept.reverse()
    return kept


def build_msg_context(
    history: Sequence[ContextItem],
    *,
    budget_chars: int,
    summary: str | None = None,
    memories: Iterable[ContextItem] = (),
) -> str:
    """The `<!-- MSG_CONTEXT: {...} -->` marker: recent history within the budget, the
    thread summary if any, and (for later retrieval work) relevant older memories.

    The JSON is the encoding of `{"history": [...], "summary": ..., "memories": [...]}`,
    written from the items' own encodings (each item is encoded once per turn)."""
    parts = ['{"history":[', ",".join(
        item.encoded for item in select_within_budget(history, budget_chars)), "]"]
    if summary:
        parts += [',"summary":', encode_context_json(summary)]
    recalled = ",".join(item.encoded for item in memories)
    if recalled:
        parts += [',"memories":[', recalled, "]"]
    return f"<!-- MSG_CONTEXT: {''.join(parts)}}} -->"


#: The one sequence every marker header starts with, and its harmless spelling.
COMMENT_OPEN, COMMENT_OPEN_ESCAPED = "<!--", "&lt;!--"


def escape_user_text(text: str) -> str:
    """The user's text with no `<!--` left: nothing the user types can become a marker the
    model (or the MarkerFilter reading an echo) takes for the gateway's own. The replacement
    holds no `<`, so it cannot join neighbouring characters into a new `<!--`."""
    return text.replace(COMMENT_OPEN, COMMENT_OPEN_ESCAPED)


def build_upstream_messages(
    system_prompt: str, msg_context: str, user_text: str
) -> list[dict[str, str]]:
    """The chat messages of the upstream request: the system prompt, then one user message
    holding the context marker, a newline and the user's text with `<!--` escaped."""
    return [
        {"role": "system", "content": system_prompt},
        {"role": "user", "content": f"{msg_context}\n{escape_user_text(user_text)}"},
    ]
