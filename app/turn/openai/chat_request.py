"""A `/v1/chat/completions` body checked field by field, each refusal a 400 naming its
`param`, as OpenAI answers. Only what the gateway itself reads is checked; every other field
(tools, temperature, a provider's own) goes upstream as it came."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request

from app.answer.choices import MAX_CHOICES
from app.api.bodies import NUL, NUL_REFUSED
from app.turn.openai.errors import THREAD_HEADER, invalid
from app.turn.run.completion import CompletionRequest, pass_through

ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})


@dataclass(frozen=True)
class ParsedRequest:
    completion: CompletionRequest
    stream: bool
    include_usage: bool


def parse_body(body: dict[str, Any]) -> ParsedRequest:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise invalid("'model' must be a non-empty string", "model")
    messages = _messages(body.get("messages"))
    n = body.get("n", 1)
    if n is None:
        n = 1
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_CHOICES:
        raise invalid(f"'n' must be an integer from 1 to {MAX_CHOICES}", "n")
    stream = body.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise invalid("'stream' must be a boolean", "stream")
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise invalid("'stream_options' must be an object", "stream_options")
    include_usage = options.get("include_usage", False)
    if not isinstance(include_usage, bool):
        raise invalid("'stream_options.include_usage' must be a boolean",
                      "stream_options.include_usage")
    return ParsedRequest(CompletionRequest(model, messages, n, pass_through(body)),
                         stream, stream and include_usage)


def _messages(raw: Any) -> list[dict[str, Any]]:
    if not isinstance(raw, list) or not raw:
        raise invalid("'messages' must be a non-empty array", "messages")
    for position, message in enumerate(raw):
        param = f"messages[{position}]"
        if not isinstance(message, dict):
            raise invalid(f"'{param}' must be an object", param)
        role = message.get("role")
        if not isinstance(role, str) or role not in ROLES:  # an object is no role (unhashable)
            raise invalid(f"'{param}.role' must be one of {', '.join(sorted(ROLES))}",
                          f"{param}.role")
        _content(message.get("content"), f"{param}.content",
                 optional=message["role"] == "assistant")
        if isinstance(name := message.get("name"), str) and NUL in name:
            raise invalid(NUL_REFUSED.format(field=f"'{param}.name'"), f"{param}.name")
    if not any(message["role"] == "user" for message in raw):
        raise invalid("'messages' must hold at least one user message", "messages")
    return raw


def _content(content: Any, param: str, *, optional: bool) -> None:
    """A string, or an array of content parts (objects with a `type`; `text` ones with a
    string `text`); null only for an assistant (a tool call). No text holds a NUL: as on the
    native API, a text is stored as typed or refused."""
    if content is None and optional:
        return
    if isinstance(content, str):
        if NUL in content:
            raise invalid(NUL_REFUSED.format(field=f"'{param}'"), param)
        return
    if not isinstance(content, list):
        raise invalid(f"'{param}' must be a string or an array of content parts", param)
    for part in content:
        if not isinstance(part, dict) or not isinstance(part.get("type"), str):
            raise invalid(f"'{param}' parts must be objects with a 'type'", param)
        if part["type"] == "text" and not isinstance(part.get("text"), str):
            raise invalid(f"'{param}' text parts must have a string 'text'", param)
        if part["type"] == "text" and NUL in part["text"]:
            raise invalid(NUL_REFUSED.format(field=f"'{param}'"), param)


def thread_id(request: Request) -> uuid.UUID | None:
    """The thread to store the exchange in, if the client named one."""
    raw = request.headers.get(THREAD_HEADER)
    if raw is None:
        return None
    try:
        return uuid.UUID(raw.strip())
    except ValueError as exc:
        raise invalid(f"'{THREAD_HEADER}' must be a thread id (a UUID)", THREAD_HEADER) from exc
