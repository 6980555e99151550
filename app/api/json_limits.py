"""A request body's JSON, parsed and held to the limits every API shares, each refusal naming
the field by its path (`tools[0].function.parameters.properties.x.maximum`).

Python's json module takes what no model server does: integers of any size (orjson, which
writes the upstream request, stops at 64 bits), `NaN` and `Infinity` (not JSON at all), a
float literal too large for a double (it becomes infinity), and nesting almost to the
interpreter's recursion limit (the recursive walks after the parse give out long before).
A body that passes here can be walked, cleaned, stored and sent on; one that does not is
refused before anything is opened, stored, billed or sent.

The limits, documented in docs/api.md:
- an integer lies within signed 64 bits, what a model server's JSON parser and orjson take;
- a number is finite;
- an array or object nests at most 64 levels deep, the body itself being the first;
- an array holds at most 10,000 items, an object at most 10,000 members;
- a member's name is at most 256 characters.
A string's length is bounded by the body's size cap (app.api.bodies), and a message's
content by `max_content_chars`.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any, TypeAlias

MAX_DEPTH = 64
MIN_INTEGER = -(2**63)
MAX_INTEGER = 2**63 - 1
MAX_ITEMS = 10_000
MAX_KEY_CHARS = 256
#: Longest integer literal worth converting to find out: 20 characters hold every signed
#: 64-bit value with its sign, so a longer one is out of range without being read (and a
#: 5,000-digit one would hit Python's own limit on converting digits).
_INTEGER_CHARS = 20
#: A name as it may stand after a dot in a path; any other is written as `["..."]`.
_PLAIN_NAME = re.compile(r"[A-Za-z_$][A-Za-z0-9_$-]*")
#: The tokens that matter for finding where a body nests too deep: strings (skipped whole,
#: brackets in them are text) and the structural characters.
_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{},:]', re.DOTALL)


class InvalidJson(ValueError):
    """Not JSON at all, or not a JSON object."""


class JsonLimitExceeded(ValueError):
    """Valid JSON past one of the limits: `code` says which, `path` where (None: the body
    itself), `message` both in a sentence."""

    def __init__(self, code: str, path: str | None, message: str) -> None:
        super().__init__(message)
        self.code, self.path, self.message = code, path, message


@dataclass(frozen=True)
class _OutOfRange:
    """An integer literal past signed 64 bits, as written (kept from the parse to the walk,
    which knows where it stands)."""

    literal: str


@dataclass(frozen=True)
class _Constant:
    """`NaN`, `Infinity` or `-Infinity`, which Python's parser takes and JSON does not."""

    name: str


def _integer(literal: str) -> int | _OutOfRange:
    if len(literal) <= _INTEGER_CHARS:
        value = int(literal)
        if MIN_INTEGER <= value <= MAX_INTEGER:
            return value
    return _OutOfRange(literal)


def loads_object(raw: bytes) -> dict[str, Any]:
    """The body as a dict within every limit. Raises InvalidJson or JsonLimitExceeded."""
    try:
        data = json.loads(raw, parse_int=_integer, parse_constant=_Constant)
    except RecursionError:  # nesting near a thousand levels: past the limit, find where
        raise _too_deep(_deep_path(raw)) from None
    except ValueError as exc:  # UnicodeDecodeError is one
        raise InvalidJson("the request body is not valid JSON") from exc
    if not isinstance(data, dict):
        raise InvalidJson("the request body must be a JSON object")
    check(data)
    return data


# A link of the walk: the container's parent link and its key or index there (None: the
# body). Paths are written from these only for a refusal.
_Link: TypeAlias = tuple["_Link", str | int] | None


def check(body: dict[str, Any]) -> None:
    """Every value of a parsed body within the limits, or JsonLimitExceeded for the first
    one the walk meets that is not. Iterative: a body deeper than the limit is refused
    at the limit, whatever its depth, without using the interpreter's stack."""
    stack: list[tuple[Any, int, _Link]] = [(body, 1, None)]
    while stack:
        container, depth, link = stack.pop()
        if len(container) > MAX_ITEMS:
            noun = "members" if isinstance(container, dict) else "items"
            raise JsonLimitExceeded(
                "too_many_items", _path(link),
                f"{_name(link)} has {len(container)} {noun}; the limit is {MAX_ITEMS}")
        items = container.items() if isinstance(container, dict) else enumerate(container)
        children: list[tuple[Any, int, _Link]] = []
        for key, value in items:
            if isinstance(key, str) and len(key) > MAX_KEY_CHARS:
                raise JsonLimitExceeded(
                    "key_too_long", _path(link),
                    f"{_name(link)} has a member name of {len(key)} characters; the limit "
                    f"is {MAX_KEY_CHARS}")
            kind = type(value)
            if kind is dict or kind is list:
                if depth == MAX_DEPTH:
                    raise _too_deep(_path((link, key)))
                if value:
                    children.append((value, depth + 1, (link, key)))
            elif kind is float:
                if not math.isfinite(value):
                    raise _not_finite((link, key), "a number too large for a double")
            elif kind is _Constant:
                raise _not_finite((link, key), value.name)
            elif kind is _OutOfRange:
                raise JsonLimitExceeded(
                    "integer_out_of_range", _path((link, key)),
                    f"{_name((link, key))} is {_shortened(value.literal)}; an integer must "
                    f"lie from {MIN_INTEGER} to {MAX_INTEGER} (signed 64 bits)")
        stack.extend(reversed(children))  # the first child is walked first


def _not_finite(link: _Link, what: str) -> JsonLimitExceeded:
    return JsonLimitExceeded("non_finite_number", _path(link),
                             f"{_name(link)} is {what}; a number must be finite "
                             "(NaN and Infinity are not JSON)")


def _too_deep(path: str | None) -> JsonLimitExceeded:
    where = f"'{path}'" if path else "the request body"
    return JsonLimitExceeded("nesting_too_deep", path,
                             f"{where} nests deeper than {MAX_DEPTH} levels of arrays and "
                             "objects")


def _shortened(literal: str) -> str:
    return literal if len(literal) <= 40 else f"{literal[:20]}…({len(literal)} digits)"


def _name(link: _Link) -> str:
    path = _path(link)
    return f"'{path}'" if path else "the request body"


def _path(link: _Link) -> str | None:
    """`a.b[0]["odd key"]`: names after dots where plain, indexes and other names in
    brackets; None for the body itself."""
    parts: list[str | int] = []
    while link is not None:
        link, key = link
        parts.append(key)
    return format_path(reversed(parts)) or None


def format_path(parts: Any) -> str:
    text = ""
    for part in parts:
        if isinstance(part, int):
            text += f"[{part}]"
        elif _PLAIN_NAME.fullmatch(part):
            text += f".{part}" if text else part
        else:
            text += f"[{json.dumps(part, ensure_ascii=False)}]"
    return text


def _deep_path(raw: bytes) -> str | None:
    """The path of the first array or object past MAX_DEPTH in a body too deep for the
    parser, read from its tokens: each open container's current member name or index."""
    open_: list[list[Any]] = []  # [kind, its current key or index]
    last_string = b'""'
    for match in _TOKEN.finditer(raw):
        token = match.group()
        if token[0] == ord('"'):
            last_string = token
        elif token in (b"[", b"{"):
            if len(open_) == MAX_DEPTH:
                return format_path(position for _, position in open_
                                   if position is not None) or None
            open_.append([token, 0 if token == b"[" else None])
        elif token in (b"]", b"}"):
            if not open_:
                break
            open_.pop()
        elif token == b":" and open_:
            open_[-1][1] = _key(last_string)
        elif token == b"," and open_ and open_[-1][0] == b"[":
            open_[-1][1] += 1
    return None


def _key(token: bytes) -> str:
    try:
        key = json.loads(token)
    except ValueError:
        return token.decode("utf-8", "replace")
    return key if isinstance(key, str) else str(key)
