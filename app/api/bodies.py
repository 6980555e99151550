"""Request body parsing with precise 4xx answers."""

from __future__ import annotations

import json
import uuid
from typing import Any

from starlette.requests import Request

from app.api.errors import ApiError, not_found


async def json_object(request: Request, *, optional: bool = False) -> dict[str, Any]:
    """The body as a JSON object: 400 when it is not JSON or not an object."""
    raw = await request.body()
    if optional and not raw.strip():
        return {}
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError) as exc:  # RecursionError: absurdly deep nesting
        raise ApiError(400, "invalid_json", "the request body is not valid JSON") from exc
    if not isinstance(data, dict):
        raise ApiError(400, "invalid_json", "the request body must be a JSON object")
    return data


def message_content(body: dict[str, Any], max_chars: int) -> str:
    """`content`: a non-empty string (422) of at most `max_chars` characters (413)."""
    content = body.get("content")
    if not isinstance(content, str):
        raise ApiError(422, "invalid_content", "'content' must be a string")
    if not content.strip():
        raise ApiError(422, "invalid_content", "'content' must not be empty")
    if len(content) > max_chars:
        raise ApiError(
            413, "content_too_long",
            f"'content' is {len(content)} characters; the limit is {max_chars}",
        )
    return content


def optional_title(body: dict[str, Any]) -> str | None:
    """`title`: absent, null or a string of at most 200 characters (422 otherwise)."""
    title = body.get("title")
    if title is None:
        return None
    if not isinstance(title, str) or len(title) > 200:
        raise ApiError(422, "invalid_title", "'title' must be a string of at most 200 characters")
    return title.strip() or None


def thread_id(request: Request) -> uuid.UUID:
    """The path's thread id; a malformed id is just another unknown thread (404)."""
    try:
        return uuid.UUID(str(request.path_params["thread_id"]))
    except ValueError as exc:
        raise not_found() from exc


def flag(request: Request, name: str) -> bool:
    """A boolean query flag: `true`/`1`/`yes` switch it on."""
    return request.query_params.get(name, "").lower() in {"true", "1", "yes"}
