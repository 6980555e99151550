"""A `/v1/messages` body checked field by field and turned into the chat shape the completion
service speaks, so that an Anthropic client's call runs the call path `/v1/chat/completions`
runs (the same escaping of every client text, limits, storing and billing):

    system (a string or text blocks)   a `system` message, first
    user text and image blocks         a `user` message (images as `image_url` parts)
    tool_result blocks                 `tool` messages (ahead of the user's other blocks)
    assistant text and tool_use        an `assistant` message with `tool_calls`
    thinking blocks                    left out: a model's reasoning is never sent back
    max_tokens, temperature, top_p     the same upstream fields
    stop_sequences                     `stop`
    metadata.user_id                   `user`
    tools (name, description,          function tools (`input_schema` as `parameters`),
      input_schema), tool_choice       `auto`/`any`/`tool`/`none` as chat completions says them

Each refusal is a 400 that names the field. Fields not read here (`top_k`, `thinking`,
`service_tier`, ...) are accepted and not sent: a chat completions model server reads them
otherwise or not at all."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

from app.api.bodies import NUL, NUL_REFUSED
from app.turn.anthropic.errors import AnthropicError, invalid
from app.turn.run.completion import CompletionRequest

_ROLES = frozenset({"user", "assistant"})
#: Tool types that are plain client tools (Anthropic's server tools, such as web search,
#: run at Anthropic and have no chat completions counterpart).
_CLIENT_TOOL_TYPES = frozenset({None, "custom"})


@dataclass(frozen=True)
class MessagesRequest:
    completion: CompletionRequest
    stream: bool


def parse_messages_body(body: dict[str, Any]) -> MessagesRequest:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise invalid("model: Field required (a non-empty string)")
    max_tokens = body.get("max_tokens")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise invalid("max_tokens: Field required (a positive integer)")
    stream = body.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise invalid("stream: must be a boolean")
    messages = [*_system(body.get("system")), *_messages(body.get("messages"))]
    params: dict[str, Any] = {"max_tokens": max_tokens, **_sampling(body)}
    params.update(_tools(body.get("tools"), body.get("tool_choice")))
    return MessagesRequest(CompletionRequest(model, messages, 1, params), stream)


def count_request(body: dict[str, Any]) -> CompletionRequest:
    """A `count_tokens` body (a messages body without `max_tokens`) in the chat shape."""
    return parse_messages_body({**body, "max_tokens": 1, "stream": False}).completion


def _text(value: Any, field: str) -> str:
    if not isinstance(value, str):
        raise invalid(f"{field}: must be a string")
    if NUL in value:
        raise invalid(NUL_REFUSED.format(field=field))
    return value


def _system(raw: Any) -> list[dict[str, Any]]:
    if raw is None:
        return []
    if isinstance(raw, str):
        return [{"role": "system", "content": _text(raw, "system")}] if raw else []
    if not isinstance(raw, list):
        raise invalid("system: must be a string or an array of text blocks")
    texts = []
    for i, block in enumerate(raw):
        if not isinstance(block, dict) or block.get("type") != "text":
            raise invalid(f"system.{i}: must be a text block")
        texts.append(_text(block.get("text"), f"system.{i}.text"))
    return [{"role": "system", "content": "\n\n".join(texts)}] if texts else []


def _messages(raw: Any) -> list[dict[str, Any]]:
    if not isinstance(raw, list) or not raw:
        raise invalid("messages: must be a non-empty array")
    out: list[dict[str, Any]] = []
    for i, message in enumerate(raw):
        field = f"messages.{i}"
        if not isinstance(message, dict):
            raise invalid(f"{field}: must be an object")
        role = message.get("role")
        if not isinstance(role, str) or role not in _ROLES:
            raise invalid(f"{field}.role: must be 'user' or 'assistant'")
        blocks = _blocks(message.get("content"), f"{field}.content")
        out += _user(blocks, field) if role == "user" else _assistant(blocks, field)
    if not any(m["role"] == "user" for m in out):
        raise invalid("messages: must hold a user message with some text")
    return out


def _blocks(content: Any, field: str) -> list[dict[str, Any]]:
    """The content as blocks (a string is one text block); each an object with a `type`."""
    if isinstance(content, str):
        return [{"type": "text", "text": _text(content, field)}]
    if not isinstance(content, list):
        raise invalid(f"{field}: must be a string or an array of content blocks")
    for j, block in enumerate(content):
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            raise invalid(f"{field}.{j}: must be a content block with a 'type'")
    return content


def _user(blocks: list[dict[str, Any]], field: str) -> list[dict[str, Any]]:
    """Tool results first (a `tool` message must follow the assistant's tool call), then the
    user's own text and images as one user message."""
    tools: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for j, block in enumerate(blocks):
        at = f"{field}.content.{j}"
        match block["type"]:
            case "text":
                parts.append({"type": "text", "text": _text(block.get("text"), f"{at}.text")})
            case "image":
                parts.append({"type": "image_url", "image_url": {"url": _image_url(block, at)}})
            case "tool_result":
                tools.append(_tool_result(block, at))
            case other:
                raise invalid(f"{at}.type: '{other}' is not supported by this gateway")
    if not parts:
        return tools
    content: str | list[dict[str, Any]] = parts
    if all(part["type"] == "text" for part in parts):
        content = "".join(part["text"] for part in parts)
    return [*tools, {"role": "user", "content": content}]


def _image_url(block: dict[str, Any], at: str) -> str:
    source = block.get("source")
    if isinstance(source, dict) and source.get("type") == "url":
        return _text(source.get("url"), f"{at}.source.url")
    if isinstance(source, dict) and source.get("type") == "base64":
        media = _text(source.get("media_type"), f"{at}.source.media_type")
        return f"data:{media};base64,{_text(source.get('data'), f'{at}.source.data')}"
    raise invalid(f"{at}.source: must be a 'base64' or 'url' image source")


def _tool_result(block: dict[str, Any], at: str) -> dict[str, Any]:
    call_id = _text(block.get("tool_use_id"), f"{at}.tool_use_id")
    content = block.get("content", "")
    if isinstance(content, list):
        texts = []
        for k, part in enumerate(content):
            if not isinstance(part, dict) or not isinstance(part.get("type"), str):
                raise invalid(f"{at}.content.{k}: must be a content block with a 'type'")
            texts.append(_text(part.get("text"), f"{at}.content.{k}.text")
                         if part["type"] == "text" else f"[{part['type']}]")
        content = "".join(texts)
    text = _text(content, f"{at}.content")
    if block.get("is_error") is True:
        text = f"[error] {text}"
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def _assistant(blocks: list[dict[str, Any]], field: str) -> list[dict[str, Any]]:
    text: list[str] = []
    calls: list[dict[str, Any]] = []
    for j, block in enumerate(blocks):
        at = f"{field}.content.{j}"
        match block["type"]:
            case "text":
                text.append(_text(block.get("text"), f"{at}.text"))
            case "tool_use":
                calls.append(_tool_use(block, at))
            case "thinking" | "redacted_thinking":
                continue  # the model's reasoning is never sent back to it
            case other:
                raise invalid(f"{at}.type: '{other}' is not supported by this gateway")
    if not text and not calls:
        return []
    message: dict[str, Any] = {"role": "assistant", "content": "".join(text) or None}
    if calls:
        message["tool_calls"] = calls
    return [message]


def _tool_use(block: dict[str, Any], at: str) -> dict[str, Any]:
    call_id = _text(block.get("id"), f"{at}.id")
    name = _text(block.get("name"), f"{at}.name")
    arguments = block.get("input", {})
    if not isinstance(arguments, dict):
        raise invalid(f"{at}.input: must be an object")
    encoded = json.dumps(arguments, ensure_ascii=False)
    if NUL in encoded:
        raise invalid(NUL_REFUSED.format(field=f"{at}.input"))
    return {"id": call_id, "type": "function",
            "function": {"name": name, "arguments": encoded}}


def _sampling(body: dict[str, Any]) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for name in ("temperature", "top_p"):
        value = body.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise invalid(f"{name}: must be a number")
        params[name] = value
    stops = body.get("stop_sequences")
    if stops is not None:
        if not isinstance(stops, list):
            raise invalid("stop_sequences: must be an array of strings")
        if stops:
            params["stop"] = [_text(s, f"stop_sequences.{i}") for i, s in enumerate(stops)]
    metadata = body.get("metadata")
    if metadata is not None:
        if not isinstance(metadata, dict):
            raise invalid("metadata: must be an object")
        if (user := metadata.get("user_id")) is not None:
            params["user"] = _text(user, "metadata.user_id")
    return params


def _tools(raw: Any, choice: Any) -> dict[str, Any]:
    params: dict[str, Any] = {}
    if raw is not None:
        if not isinstance(raw, list):
            raise invalid("tools: must be an array")
        if raw:
            params["tools"] = [_tool(tool, f"tools.{i}") for i, tool in enumerate(raw)]
    if choice is not None:
        params.update(_tool_choice(choice))
    return params


def _tool(tool: Any, at: str) -> dict[str, Any]:
    if not isinstance(tool, dict):
        raise invalid(f"{at}: must be an object")
    kind = tool.get("type")
    if not (kind is None or isinstance(kind, str)) or kind not in _CLIENT_TOOL_TYPES:
        raise invalid(f"{at}.type: '{kind}' is not supported by this gateway (only client "
                      "tools, with an input_schema)")
    function: dict[str, Any] = {"name": _text(tool.get("name"), f"{at}.name")}
    if (description := tool.get("description")) is not None:
        function["description"] = _text(description, f"{at}.description")
    schema = tool.get("input_schema")
    if not isinstance(schema, dict):
        raise invalid(f"{at}.input_schema: Field required (a JSON schema object)")
    function["parameters"] = schema
    return {"type": "function", "function": function}


def _tool_choice(choice: Any) -> dict[str, Any]:
    if not isinstance(choice, dict):
        raise invalid("tool_choice: must be an object")
    params: dict[str, Any] = {}
    match choice.get("type"):
        case "auto":
            params["tool_choice"] = "auto"
        case "any":
            params["tool_choice"] = "required"
        case "none":
            params["tool_choice"] = "none"
        case "tool":
            name = _text(choice.get("name"), "tool_choice.name")
            params["tool_choice"] = {"type": "function", "function": {"name": name}}
        case other:
            raise invalid(f"tool_choice.type: '{other}' is not one of auto, any, tool, none")
    if choice.get("disable_parallel_tool_use") is True:
        params["parallel_tool_calls"] = False
    return params


def thread_id(raw: str | None, header: str) -> uuid.UUID | None:
    """The thread to store the exchange in, if the client named one (as on chat
    completions)."""
    if raw is None:
        return None
    try:
        return uuid.UUID(raw.strip())
    except ValueError as exc:
        raise AnthropicError(400, f"{header}: must be a thread id (a UUID)") from exc
