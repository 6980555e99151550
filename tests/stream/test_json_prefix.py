"""The body automaton against the oracle's recursive-descent checker and json.loads."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.stream.decode import decode_object
from app.stream.json_prefix import COMPLETE, INVALID, MORE, JsonObjectPrefix
from tests.stream.hostile import chunkings
from tests.stream.oracle import Invalid, Truncated, object_end
from tests.support.properties import property_settings

SETTINGS = property_settings(max_examples=1500)

BITS = ["{", "}", "[", "]", ":", ",", '"', "\\", "\\u", "00e9", "\\n", "\\x", "a", "é", "🐎"]
BITS += [" ", "\t", "\r", "\n", "\x0b", "\x00", "\x1f", "0", "1", "-", ".", "e", "E", "+"]
BITS += ["true", "false", "null", "tru", "NaN", '"k"', '"k": ', "12", "-0.5e-3", "01"]
jsonish = st.lists(st.sampled_from(BITS), max_size=30).map(lambda bits: "{" + "".join(bits))

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4)
    ),
    max_leaves=12,
)


def scan_in_pieces(text: str, pieces: list[str]) -> tuple[str, int]:
    automaton = JsonObjectPrefix()
    offset = 0
    for piece in pieces:
        outcome, position = automaton.scan(text, offset, offset + len(piece))
        if outcome == COMPLETE:
            return "complete", position
        if outcome == INVALID:
            return "invalid", position
        assert outcome == MORE and position == offset + len(piece)
        offset += len(piece)
    return "truncated", len(text)


def reference_outcome(text: str) -> tuple[str, int]:
    try:
        return "complete", object_end(text, 0, len(text))
    except Invalid as invalid:
        return "invalid", invalid.p
    except Truncated:
        return "truncated", len(text)


@SETTINGS
@given(data=st.data(), text=jsonish)
def test_automaton_agrees_with_recursive_descent(data: st.DataObject, text: str) -> None:
    got = scan_in_pieces(text, data.draw(chunkings(text)))
    assert got == reference_outcome(text)
    if got[0] == "complete":
        assert decode_object(text[: got[1]]) == json.loads(text[: got[1]])


@property_settings(max_examples=400)
@given(data=st.data(), value=st.dictionaries(st.text(max_size=5), json_values, max_size=5))
def test_serialised_objects_complete_exactly_at_their_end(data: st.DataObject, value: Any) -> None:
    indent = data.draw(st.sampled_from([None, 0, 2, "\t"]))
    text = json.dumps(value, indent=indent, ensure_ascii=data.draw(st.booleans()))
    assert scan_in_pieces(text + " tail", data.draw(chunkings(text + " tail"))) == (
        "complete",
        len(text),
    )
    assert scan_in_pieces(text[:-1], data.draw(chunkings(text[:-1]))) == (
        "truncated",
        len(text) - 1,
    )
    assert decode_object(text) == value


@pytest.mark.parametrize(
    ("text", "outcome"),
    [
        ("{}", ("complete", 2)),
        ('{"a": [1, {"b": null}]}', ("complete", 23)),
        ("[1]", ("invalid", 0)),
        (' {"a": 1}', ("invalid", 0)),
        ('{"a": 01}', ("invalid", 7)),
        ('{"a": -}', ("invalid", 7)),
        ('{"a": 1.}', ("invalid", 8)),
        ('{"a": 1e+}', ("invalid", 9)),
        ('{"a": NaN}', ("invalid", 6)),
        ('{"a": tru}', ("invalid", 9)),
        ('{"a": "\x01"}', ("invalid", 7)),
        ('{"a": "\\x"}', ("invalid", 8)),
        ('{"a": "\\u00g0"}', ("invalid", 11)),
        ('{"a": 1,}', ("invalid", 8)),
        ('{"a"\x0b: 1}', ("invalid", 4)),
        ('{"a": [1, 2}', ("invalid", 11)),
        ('{"a": 12', ("truncated", 8)),
        ('{"a": "x', ("truncated", 8)),
    ],
)
def test_known_outcomes(text: str, outcome: tuple[str, int]) -> None:
    assert reference_outcome(text) == outcome
    for pieces in ([text], list(text)):
        assert scan_in_pieces(text, pieces) == outcome
