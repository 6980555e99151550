"""The upstream request of an OpenAI-style call: the client's own `messages`, sent the way the
native API sends a thread.

    [gateway system prompt]               the METADATA instruction, first
    [client's system/developer messages]  in order, `<!--` escaped
    user: <!-- MSG_CONTEXT: {...} -->\\n<last user message, `<!--` escaped>
    [what followed the last user message] assistant tool calls and `tool` results, escaped

Folded into MSG_CONTEXT's `history` (the same builder, escaping and character budget as a
thread's history): every user and assistant message before the last user message, as
`{"role", "content"}`; an assistant's text is cleaned of markers first (clients echo what other
gateways stored), an earlier assistant tool call is written `[tool call name(arguments)]`, an
earlier `tool` result is kept with role `tool`, and a non-text content part is written
`[image]`, `[audio]`, ... by its type. Messages after the last user message (a tool round in
progress) pass as messages, an assistant's text cleaned of markers and its reasoning fields
(`reasoning_content`, `reasoning`) left out: a tool result must follow the assistant message
that asked for it, and the model's reasoning is never sent back to it.

Every text the client sent is data, never a marker: in every message that passes as a message
(instructions, the last user message, the tool round), each `<!--` of its text (a string or
text parts), its `name` and its tool calls' names and arguments is written `&lt;!--`, as a
native user's text is (`escape_user_text`). Tool output is untrusted content, and a client's
system message may carry another party's text. Only the gateway's own MSG_CONTEXT opens with
`<!--`."""

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


def _folded(message: Mapping[str, Any], at: dt.datetime | None = None) -> ContextItem | None:
    role = message.get("role")
    text = content_text(message.get("content"))
    if role == "assistant":
        text = _clean(text)
        for call in message.get("tool_calls") or ():
            function = call.get("function") or {}
            text += f"[tool call {function.get('name')}({function.get('arguments', '')})]"
    elif role not in ("user", "tool"):
        return None
    if not text:
        return None
    return ClientItem(str(role), text, _EPOCH) if at is None else ContextItem(str(role), text, at)


def last_user_index(messages: Sequence[Mapping[str, Any]]) -> int | None:
    return next((i for i in range(len(messages) - 1, -1, -1)
                 if messages[i].get("role") == "user"), None)


def _escaped_content(content: Any) -> Any:
    """A message's content with `<!--` escaped in its text: a string, or its text parts
    (other parts, an image's URL, are not text the model reads as the conversation)."""
    if isinstance(content, str):
        return escape_user_text(content)
    if isinstance(content, list):
        return [{**part, "text": escape_user_text(part["text"])}
                if part.get("type") == "text" and isinstance(part.get("text"), str)
                else part for part in content]
    return content


def _escaped_call(call: Any) -> Any:
    function = call.get("function") if isinstance(call, Mapping) else None
    if not isinstance(function, Mapping):
        return call
    return {**call, "function": {k: escape_user_text(v) if isinstance(v, str) else v
                                 for k, v in function.items()}}


def escaped_message(message: Mapping[str, Any]) -> dict[str, Any]:
    """The message as the model may see it: `<!--` escaped in its content, its `name` and
    its tool calls (module docstring); every other field as it came."""
    escaped = dict(message)
    if "content" in escaped:
        escaped["content"] = _escaped_content(escaped["content"])
    if isinstance(escaped.get("name"), str):
        escaped["name"] = escape_user_text(escaped["name"])
    if isinstance(escaped.get("tool_calls"), list):
        escaped["tool_calls"] = [_escaped_call(call) for call in escaped["tool_calls"]]
    return escaped


def _with_context(message: Mapping[str, Any], marker: str) -> dict[str, Any]:
    """The last user message, escaped, with the marker ahead of its text."""
    escaped = escaped_message(message)
    content = escaped.get("content")
    if isinstance(content, str) or content is None:
        return {**escaped, "content": f"{marker}\n{content or ''}"}
    return {**escaped, "content": [{"type": "text", "text": marker + "\n"}, *content]}


#: The fields an assistant message may carry its model's reasoning in (as a client echoes a
#: reasoning model's answer): never sent back to the model.
REASONING_FIELDS = frozenset({"reasoning_content", "reasoning"})


def _passed(message: Mapping[str, Any]) -> dict[str, Any]:
    if message.get("role") == "assistant":
        message = {k: v for k, v in message.items() if k not in REASONING_FIELDS}
        if isinstance(message.get("content"), str):
            message["content"] = _clean(message["content"])
    return escaped_message(message)


def upstream_messages(
    messages: Sequence[Mapping[str, Any]], *, system_prompt: str, budget_chars: int,
    summary: str | None = None, memories: Iterable[ContextItem] = (),
    times: Sequence[dt.datetime | None] = (),
) -> list[dict[str, Any]]:
    """The upstream request's messages (module docstring). `messages` holds a user message
    (the request parser checks it). `times`: when each message was stored, for messages read
    from a thread (a Responses continuation), so that its history shows the times a
    thread's does."""
    last = last_user_index(messages)
    if last is None:
        raise ValueError("messages hold no user message")
    instructions = [escaped_message(m) for m in messages if m.get("role") in SYSTEM_ROLES]
    at = list(times) + [None] * (len(messages) - len(times))
    earlier = [item for i, m in enumerate(messages[:last])
               if (item := _folded(m, at[i])) is not None]
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
