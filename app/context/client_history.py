"""The upstream request of an OpenAI-style call: the client's own `messages`, sent the way the
native API sends a thread.

    [gateway system prompt]               the METADATA instruction, first
    [client's system/developer messages]  as they came, in order
    user: <!-- MSG_CONTEXT: {...} -->\\n<last user message, `<!--` escaped>
    [what followed the last user message] assistant tool calls and `tool` results, untouched

Folded into MSG_CONTEXT's `history` (the same builder, escaping and character budget as a
thread's history): every user and assistant message before the last user message, as
`{"role", "content"}`; an assistant's text is cleaned of markers first (clients echo what other
gateways stored), an earlier assistant tool call is written `[tool call name(arguments)]`, an
earlier `tool` result is kept with role `tool`, and a non-text content part is written
`[image]`, `[audio]`, ... by its type. Messages after the last user message (a tool round in
progress) pass as messages, only an assistant's text cleaned of markers: a tool result must
follow the assistant message that asked for it."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from app.context.builder import ContextItem, build_msg_context, escape_user_text
from app.sanitize import clean_and_strip_markers

#: Roles the client may send as its own instructions.
SYSTEM_ROLES = frozenset({"system", "developer"})
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


@dataclass(frozen=True)
class ClientItem(ContextItem):
    """An earlier message of the client's request: it has no time the gateway knows."""

    def as_json(self) -> dict[str, str]:
        return {"role": self.role, "content": self.content}


def content_text(content: Any) -> str:
    """A message's text: the string, or its content parts with text kept and the others
    named by their type."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for part in content:
        kind = part.get("type")
        parts.append(part.get("text", "") if kind == "text" else f"[{kind}]")
    return "".join(parts)


def _clean(text: str) -> str:
    return clean_and_strip_markers(text).text


def _folded(message: Mapping[str, Any]) -> ContextItem | None:
    role = message.get("role")
    text = content_text(message.get("content"))
    if role == "assistant":
        text = _clean(text)
        for call in message.get("tool_calls") or ():
            function = call.get("function") or {}
            text += f"[tool call {function.get('name')}({function.get('arguments', '')})]"
    elif role not in ("user", "tool"):
        return None
    return ClientItem(str(role), text, _EPOCH) if text else None


def last_user_index(messages: Sequence[Mapping[str, Any]]) -> int | None:
    return next((i for i in range(len(messages) - 1, -1, -1)
                 if messages[i].get("role") == "user"), None)


def _with_context(message: Mapping[str, Any], marker: str) -> dict[str, Any]:
    """The last user message with the marker ahead of its (escaped) text."""
    content = message.get("content")
    if isinstance(content, str) or content is None:
        return {**message, "content": f"{marker}\n{escape_user_text(content or '')}"}
    parts = [{**part, "text": escape_user_text(part.get("text", ""))}
             if part.get("type") == "text" else dict(part) for part in content]
    return {**message, "content": [{"type": "text", "text": marker + "\n"}, *parts]}


def _passed(message: Mapping[str, Any]) -> dict[str, Any]:
    if message.get("role") == "assistant" and isinstance(message.get("content"), str):
        return {**message, "content": _clean(message["content"])}
    return dict(message)


def upstream_messages(
    messages: Sequence[Mapping[str, Any]], *, system_prompt: str, budget_chars: int,
    summary: str | None = None, memories: Iterable[ContextItem] = (),
) -> list[dict[str, Any]]:
    """The upstream request's messages (module docstring). `messages` holds a user message
    (the request parser checks it)."""
    last = last_user_index(messages)
    if last is None:
        raise ValueError("messages hold no user message")
    instructions = [dict(m) for m in messages if m.get("role") in SYSTEM_ROLES]
    earlier = [item for m in messages[:last] if (item := _folded(m)) is not None]
    marker = build_msg_context(earlier, budget_chars=budget_chars, summary=summary,
                               memories=memories)
    after = [_passed(m) for m in messages[last + 1:] if m.get("role") not in SYSTEM_ROLES]
    return [{"role": "system", "content": system_prompt}, *instructions,
            _with_context(messages[last], marker), *after]


def flat_prompt(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    """The messages as role and text only, for a token estimate (tool calls as their JSON)."""
    flat: list[dict[str, str]] = []
    for message in messages:
        text = content_text(message.get("content"))
        if message.get("tool_calls"):
            text += json.dumps(message["tool_calls"], ensure_ascii=False)
        flat.append({"role": str(message.get("role")), "content": text})
    return flat
