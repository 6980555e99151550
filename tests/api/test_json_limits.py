"""The JSON limits of every request body (app.api.json_limits), without a gateway: what
passes is what json.loads makes of it; what does not is refused with the first field at
fault named by its path."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.api.json_limits import (
    MAX_DEPTH,
    MAX_INTEGER,
    MAX_ITEMS,
    MAX_KEY_CHARS,
    MIN_INTEGER,
    InvalidJson,
    JsonLimitExceeded,
    loads_object,
)


def refusal(raw: bytes | str) -> tuple[str, str | None]:
    with pytest.raises(JsonLimitExceeded) as caught:
        loads_object(raw.encode() if isinstance(raw, str) else raw)
    return caught.value.code, caught.value.path


def nested(depth: int, inner: str = "[]") -> str:
    """`inner` inside arrays: `depth` levels counting `inner`'s own."""
    return "[" * (depth - 1) + inner + "]" * (depth - 1)


@pytest.mark.parametrize(
    ("raw", "code", "path"),
    [
        (f'{{"seed": {MAX_INTEGER + 1}}}', "integer_out_of_range", "seed"),
        (f'{{"seed": {MIN_INTEGER - 1}}}', "integer_out_of_range", "seed"),
        ('{"seed": ' + "9" * 5000 + "}", "integer_out_of_range", "seed"),
        ('{"a": [1, {"b": NaN}]}', "non_finite_number", "a[1].b"),
        ('{"a": Infinity}', "non_finite_number", "a"),
        ('{"a": -Infinity}', "non_finite_number", "a"),
        ('{"a": 1e400}', "non_finite_number", "a"),
        ('{"odd key": {"x.y": [0, 1e999]}}', "non_finite_number", '["odd key"]["x.y"][1]'),
        (f'{{"tools": [{{"function": {{"parameters": {{"properties": {{"x": {{"maximum": '
         f'{2**64}}}}}}}}}}}]}}',
         "integer_out_of_range", "tools[0].function.parameters.properties.x.maximum"),
        ('{"a": ' + nested(MAX_DEPTH) + "}", "nesting_too_deep", "a" + "[0]" * (MAX_DEPTH - 1)),
        ('{"a": ' + nested(MAX_DEPTH, "{}") + "}", "nesting_too_deep",
         "a" + "[0]" * (MAX_DEPTH - 1)),
        # far past the parser's own recursion limit: found in the text
        ('{"a": {"b": [1, "[", ' + nested(5000) + "]}}", "nesting_too_deep",
         "a.b[2]" + "[0]" * (MAX_DEPTH - 3)),
        ('{"a": [' + ",".join(["0"] * (MAX_ITEMS + 1)) + "]}", "too_many_items", "a"),
        ("{" + ",".join(f'"k{i}": 0' for i in range(MAX_ITEMS + 1)) + "}", "too_many_items",
         None),
        ('{"a": {"' + "k" * (MAX_KEY_CHARS + 1) + '": 1}}', "key_too_long", "a"),
    ],
    ids=["int-high", "int-low", "int-5000-digits", "nan", "infinity", "minus-infinity",
         "overflowing-float", "odd-names", "tool-schema", "depth-65", "depth-65-object",
         "depth-5000", "long-array", "wide-object", "long-key"],
)
def test_a_value_past_a_limit_is_refused_naming_its_path(
    raw: str, code: str, path: str | None
) -> None:
    assert refusal(raw) == (code, path)


def test_the_message_names_the_field_and_the_limit() -> None:
    with pytest.raises(JsonLimitExceeded) as caught:
        loads_object(b'{"max_tokens": 18446744073709551616}')
    assert caught.value.message == (
        "'max_tokens' is 18446744073709551616; an integer must lie from "
        "-9223372036854775808 to 9223372036854775807 (signed 64 bits)")


@pytest.mark.parametrize(
    "raw",
    [
        f'{{"a": {MAX_INTEGER}, "b": {MIN_INTEGER}, "c": -0.0, "d": 1.7e308, "e": 1e-400}}',
        '{"a": ' + nested(MAX_DEPTH - 1) + "}",
        '{"a": [' + ",".join(["0"] * MAX_ITEMS) + "]}",
        '{"' + "k" * MAX_KEY_CHARS + '": "' + "x" * 100_000 + '"}',
        '{"text": "NaN Infinity [[[[[[ 99999999999999999999999"}',
    ],
    ids=["edges", "depth-64", "full-array", "long-key-and-string", "lookalikes-in-text"],
)
def test_what_is_within_the_limits_is_what_json_loads_makes_of_it(raw: str) -> None:
    assert loads_object(raw.encode()) == json.loads(raw)


@pytest.mark.parametrize(("raw", "message"), [
    (b"{not json", "the request body is not valid JSON"),
    (b"\xff\xfe", "the request body is not valid JSON"),
    (b'["content"]', "the request body must be a JSON object"),
    (b"42", "the request body must be a JSON object"),
])
def test_what_is_not_a_json_object_is_invalid_json(raw: bytes, message: str) -> None:
    with pytest.raises(InvalidJson, match=message):
        loads_object(raw)


_scalars = (st.none() | st.booleans() | st.integers(MIN_INTEGER, MAX_INTEGER)
            | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20))
_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                  max_size=4),
    max_leaves=30)


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(st.text(max_size=8), _values, max_size=5))
def test_any_body_within_the_limits_parses_as_json_loads_does(body: dict[str, Any]) -> None:
    raw = json.dumps(body).encode()
    assert loads_object(raw) == json.loads(raw)


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=MAX_INTEGER + 1) | st.integers(max_value=MIN_INTEGER - 1),
       st.lists(st.sampled_from(["a", "b c", 0, 1]), max_size=5))
def test_an_integer_out_of_range_anywhere_is_found_where_it_is(
    number: int, where: list[str | int]
) -> None:
    value: Any = number
    for part in reversed(where):
        value = [0, value] if isinstance(part, int) else {part: value}
    # an index n is written as a list whose item n holds the rest
    expected = "".join(
        "[1]" if isinstance(part, int) else (f".{part}" if part == "a" else '["b c"]')
        for part in where)
    with pytest.raises(JsonLimitExceeded) as caught:
        loads_object(json.dumps({"field": value}).encode())
    assert caught.value.code == "integer_out_of_range"
    assert caught.value.path == "field" + expected
