"""Request body parsing with precise 4xx answers."""

from __future__ import annotations

import re
import uuid
from typing import Any

from starlette.requests import ClientDisconnect, Request

from app.api import json_limits
from app.api.errors import ApiError, not_found
from app.api.state import runtime
from app.core.cleaning import replace_surrogates

MAX_TITLE_CHARS = 200
#: Where a body may spell a lone surrogate: a `\\uD800`-`\\uDFFF` escape, or the bytes
#: ED A0-BF (json.loads decodes bytes with `surrogatepass`). A body without them is not
#: walked.
_MAY_HOLD_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]|\xed[\xa0-\xbf]")


def max_body_bytes(max_content_chars: int) -> int:
    """The largest body worth reading: the longest allowed content with every character
    JSON-escaped at its longest (outside the BMP a surrogate pair, `\\uXXXX\\uXXXX`, 12 bytes),
    plus room for the other fields."""
    return 12 * max_content_chars + 65_536


async def _read_capped(request: Request) -> bytes:
    """The body, refused with 413 as soon as it passes the cap: never read whole into memory
    when it is absurdly large."""
    max_chars = runtime(request).settings.max_content_chars
    limit = max_body_bytes(max_chars)
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise _too_large(max_chars)
    parts: list[bytes] = []
    size = 0
    try:
        async for part in request.stream():
            size += len(part)
            if size > limit:
                raise _too_large(max_chars)
            parts.append(part)
    except ClientDisconnect as exc:  # nobody to answer; a 4xx keeps it out of the 500 path
        raise ApiError(400, "client_disconnected", "the client left while sending") from exc
    return b"".join(parts)


def _too_large(max_chars: int) -> ApiError:
    """Said in the limit a writer knows, characters; the bytes are how the gateway saw it
    without reading the whole body."""
    return ApiError(413, "body_too_large",
                    f"the message is too long: the limit is {max_chars} characters (the "
                    f"request body is over {max_body_bytes(max_chars)} bytes)")


def _require_json_media_type(request: Request) -> None:
    """415 unless the body is declared `application/json` (any parameters, any case): a form
    or plain-text post is a client mistake better named than parsed by guesswork, and a
    cross-site form cannot send this type without a CORS preflight."""
    media_type = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if media_type != "application/json":
        raise ApiError(415, "unsupported_media_type",
                       "the request body must be sent as Content-Type: application/json")


async def json_object(request: Request, *, optional: bool = False) -> dict[str, Any]:
    """The body as a JSON object: 415 when not declared JSON, 400 when it is not JSON or not
    an object, 413 when huge, 400 naming the field when a value is past the JSON limits
    (app.api.json_limits: 64-bit integers, finite numbers, 64 levels, ...). An `optional`
    body may be absent, and then needs no type. Every lone surrogate in it is U+FFFD
    (app.core.cleaning.replace_surrogates), on every route of both APIs."""
    if not optional:
        _require_json_media_type(request)
    raw = await _read_capped(request)
    if optional and not raw.strip():
        return {}
    if optional:
        _require_json_media_type(request)
    try:
        data = json_limits.loads_object(raw)
    except json_limits.InvalidJson as exc:
        raise ApiError(400, "invalid_json", str(exc)) from exc
    except json_limits.JsonLimitExceeded as exc:
        raise ApiError(400, exc.code, exc.message, param=exc.path) from exc
    if _MAY_HOLD_SURROGATE.search(raw):
        cleaned: dict[str, Any] = replace_surrogates(data)
        return cleaned
    return data


#: A NUL cannot be stored as typed (PostgreSQL text holds none): a text with one is refused,
#: never stored shortened.
NUL = "\x00"
NUL_REFUSED = "{field} must not contain NUL (U+0000) characters"


def message_content(body: dict[str, Any], max_chars: int) -> str:
    """`content`: a non-empty string without NUL (422) of at most `max_chars` characters
    (413)."""
    content = body.get("content")
    if not isinstance(content, str):
        raise ApiError(422, "invalid_content", "'content' must be a string")
    if not content.strip():
        raise ApiError(422, "invalid_content", "'content' must not be empty")
    if NUL in content:
        raise ApiError(422, "invalid_content", NUL_REFUSED.format(field="'content'"))
    if len(content) > max_chars:
        raise ApiError(
            413, "content_too_long",
            f"'content' is {len(content)} characters; the limit is {max_chars}",
        )
    return content


def _no_nul_in_title(title: str) -> None:
    """A title is refused with a NUL (422), as content is: the store would drop it and keep
    another title than the one sent."""
    if NUL in title:
        raise ApiError(422, "invalid_title", NUL_REFUSED.format(field="'title'"))


def optional_title(body: dict[str, Any]) -> str | None:
    """`title`: absent, null or a string without NUL of at most 200 characters (422
    otherwise)."""
    title = body.get("title")
    if title is None:
        return None
    if not isinstance(title, str) or len(title) > MAX_TITLE_CHARS:
        raise ApiError(422, "invalid_title", "'title' must be a string of at most 200 characters")
    _no_nul_in_title(title)
    return title.strip() or None


def required_title(body: dict[str, Any]) -> str:
    """A new `title`: a string with some text and no NUL, at most 200 characters once
    trimmed (422)."""
    title = body.get("title")
    if not isinstance(title, str):
        raise ApiError(422, "invalid_title", "'title' must be a string")
    _no_nul_in_title(title)
    title = title.strip()
    if not title:
        raise ApiError(422, "invalid_title", "'title' must not be empty")
    if len(title) > MAX_TITLE_CHARS:
        raise ApiError(422, "invalid_title",
                       f"'title' is {len(title)} characters; the limit is {MAX_TITLE_CHARS}")
    return title


def thread_id(request: Request) -> uuid.UUID:
    """The path's thread id; a malformed id is just another unknown thread (404)."""
    try:
        return uuid.UUID(str(request.path_params["thread_id"]))
    except ValueError as exc:
        raise not_found() from exc


def flag(request: Request, name: str) -> bool:
    """A boolean query flag: `true`/`1`/`yes` switch it on."""
    return request.query_params.get(name, "").lower() in {"true", "1", "yes"}


def message_ref(body: dict[str, Any], name: str) -> uuid.UUID:
    """A message's id in the body's field `name` (422 when it is not one)."""
    value = body.get(name)
    if isinstance(value, str):
        try:
            return uuid.UUID(value)
        except ValueError:
            pass
    raise ApiError(422, f"invalid_{name}", f"'{name}' must be the id of a message")


def message_id(request: Request) -> uuid.UUID:
    """The path's message id; a malformed id is just another unknown message (404)."""
    try:
        return uuid.UUID(str(request.path_params["message_id"]))
    except ValueError as exc:
        raise not_found("message") from exc


def last_event_id(request: Request) -> int | None:
    """`Last-Event-ID` (what EventSource sends on its own when it reconnects), else the
    `last_event_id` query parameter; None when neither is given. Anything but a whole
    number from 0 is a 400 `invalid_last_event_id`."""
    value = request.headers.get("last-event-id") or request.query_params.get("last_event_id")
    if value is None or value.strip() == "":
        return None
    value = value.strip()
    if not value.isascii() or not value.isdigit() or len(value) > 18:
        raise ApiError(400, "invalid_last_event_id",
                       "Last-Event-ID must be the id of a delta event (a whole number)")
    return int(value)
