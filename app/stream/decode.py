"""Turn a body the automaton accepted as a complete object into a dict.

`json.loads` does the work. Two of its limits must not turn a valid body into an
exception in the middle of a stream: deep nesting (its C scanner recurses) and numbers
that do not fit (ints over Python's digit limit, floats that overflow to infinity).
Deep bodies go through a small iterative decoder; unrepresentable numbers keep their
source text, so the metadata always serialises as strict JSON.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

JsonObject = dict[str, Any]

_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[{}\[\]:,]|[^ \t\r\n{}\[\]:,"]+')


def decode_object(body: str) -> JsonObject:
    """The object a validated body denotes."""
    try:
        value = _DECODER.decode(body)
    except RecursionError:
        value = _decode_iteratively(body)
    assert isinstance(value, dict)
    return value


def _parse_int(text: str) -> int | str:
    try:
        return int(text)
    except ValueError:  # more digits than sys.get_int_max_str_digits() allows
        return text


def _parse_float(text: str) -> float | str:
    number = float(text)
    return number if math.isfinite(number) else text


_DECODER = json.JSONDecoder(parse_int=_parse_int, parse_float=_parse_float)


def _scalar(token: str) -> Any:
    if token.startswith('"'):
        return json.loads(token)
    if token in ("true", "false", "null"):
        return {"true": True, "false": False, "null": None}[token]
    if any(c in token for c in ".eE"):
        return _parse_float(token)
    return _parse_int(token)


def _decode_iteratively(body: str) -> Any:
    """Same result as json.loads for a validated body, with an explicit stack."""
    containers: list[Any] = []
    keys: list[str | None] = []
    root: Any = None
    for token in _TOKEN.findall(body):
        if token in (":", ","):
            continue
        if token in ("}", "]"):
            root = containers.pop()
            keys.pop()
            continue
        value: Any = {} if token == "{" else [] if token == "[" else _scalar(token)
        if containers:
            top = containers[-1]
            if isinstance(top, list):
                top.append(value)
            elif keys[-1] is None:
                keys[-1] = value  # a string in key position
                continue
            else:
                top[keys[-1]] = value
                keys[-1] = None
        if token in ("{", "["):
            containers.append(value)
            keys.append(None)
    return root
