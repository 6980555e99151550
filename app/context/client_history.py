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
(instructions, the last user message, the tool round), every string at any depth (its text or
text parts, its `name`, its tool calls, a tool result's `tool_call_id`, an image's URL) has
each `<!--` written `&lt;!--`, as a native user's text is (`escape_user_text`), and a trailing
`<`, `<!` or `<!-` written with `&lt;`, so that no marker forms where a model server joins two
parts or two messages. The fields the model reads besides the messages (`tools`, their
descriptions and schemas, `tool_choice`, `response_format`, `prediction`) are escaped the
same way (`upstream_params`). Tool output is untrusted content, and a client's system message
may carry another party's text. Only the gateway's own MSG_CONTEXT opens with `<!--`. Earlier
messages folded into MSG_CONTEXT are joined first (`content_text`), then escaped as JSON."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from app.context.builder import ContextItem, build_msg_context, escape_user_text
from app.core.cleaning import clean_and_strip_markers

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


#: What a text may end with that, joined to the next text (the following content part, or
#: message, as a model server may join them), would complete a `<!--`.
_OPENING_PREFIXES = ("<", "<!", "<!-")
_LT_ESCAPED = "&lt;"


def escape_client_text(text: str) -> str:
    """A client's text as data: every `<!--` escaped (escape_user_text), and a trailing
    `<`, `<!` or `<!-` too, so that however a model server joins this text to the next one
    no marker can form across the seam."""
    text = escape_user_text(text)
    if text.endswith(_OPENING_PREFIXES):
        head, _, tail = text.rpartition("<")
        text = head + _LT_ESCAPED + tail
    return text


def escaped_value(value: Any) -> Any:
    """Every string of a JSON value escaped by escape_client_text, mapping keys too (a tool
    schema's property names are text the model reads)."""
    if isinstance(value, str):
        return escape_client_text(value)
    if isinstance(value, Mapping):
        return {escaped_value(k): escaped_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [escaped_value(v) for v in value]
    return value


def escaped_message(message: Mapping[str, Any]) -> dict[str, Any]:
    """The message as the model may see it: every string in it escaped, at any depth (its
    text or text parts, its `name`, its tool calls' ids, names and arguments, a tool
    result's `tool_call_id`, an image's URL). The role and the parts' types hold no `<`."""
    escaped: dict[str, Any] = escaped_value(message)
    return escaped


#: The request fields besides `messages` whose text the model reads (the tools it is offered
#: and their descriptions, the answer's schema, a predicted output): escaped like a message.
MODEL_READ_PARAMS = frozenset({"tools", "functions", "tool_choice", "response_format",
                               "prediction"})


def upstream_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """The fields passed to the model server besides the messages, those it reads as text
    escaped (MODEL_READ_PARAMS); the others (sampling, `stop`, `user`, ...) as they came."""
    return {k: escaped_value(v) if k in MODEL_READ_PARAMS else v for k, v in params.items()}


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
