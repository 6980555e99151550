"""Hypothesis strategies: model outputs built from the fragments that break filters."""

from __future__ import annotations

import itertools

from hypothesis import strategies as st

MARKUP = ["<!--", "<!-", "<!", "<", "-->", "--", "--->", "-", ">", "<!-- ", "<!--\n"]
KEYWORDS = ["METADATA", "metadata", "MeTaDaTa", "MSG_CONTEXT", "msg_context", "Msg_Context"]
NEAR_KEYWORDS = ["METADAT", "MSG_CONTEX", "MSG", "META", "ſ", "K"]
JSON_BITS = [":", "{", "}", "[", "]", '"', "'", "\\", ",", "\\u00e9", "\\n", "u", "00e9"]
WHITE = [" ", "\t", "\r", "\n", "\r\n", " " * 16, " " * 17]
NOT_WHITE = ["\x0b", "\x0c", "\u00a0", "\u2028", "\x01", "\x1f"]
SCALARS = ["0", "1", "7", "-", "-1", "01", "2.5", "1e3", "1E-2", "e", "E", ".", "+"]
SCALARS += ["true", "false", "null", "tru", "nul", "NaN", "Infinity"]
PROSE = ["a", "x", "Ahoj", "Příliš", "ž", "日本", "🐎", "👍🏽", "y" * 300]
OBJECTS = [
    "{}",
    '{"a": 1}',
    '{"language": "en"}',
    '{"a": 1, "b": 2}',
    '{"b": [1, {"c": null}], "t": true}',
    '{"a": "x --> y"}',
    '{"s": "<!-- METADATA: {} -->"}',
    '{"history": [{"role": "user", "content": "Ahoj"}], "summary": null}',
    '{"e": "\\"q\\" \\u00e9"}',
]
HEADERS = [
    "<!-- METADATA: ",
    "<!--METADATA:",
    "<!-- MSG_CONTEXT: ",
    "<!-- metadata ",
    "<!--msg_context",
]
CLOSERS = [" -->", "-->", "\n-->", " --->", " ----------->", " - ->"]

FRAGMENTS = (
    MARKUP
    + KEYWORDS
    + NEAR_KEYWORDS
    + JSON_BITS
    + WHITE
    + NOT_WHITE
    + SCALARS
    + PROSE
    + OBJECTS
    + HEADERS
    + CLOSERS
)

fragment = st.sampled_from(FRAGMENTS)

outputs = st.lists(fragment, max_size=40).map("".join)
"""Mostly chaos: fragments in any order."""

blocks = st.tuples(
    st.sampled_from(HEADERS),
    st.sampled_from(OBJECTS),
    st.sampled_from([*CLOSERS, "", " x", "-"]),
).map("".join)

structured_outputs = st.lists(st.one_of(blocks, fragment, fragment), max_size=25).map("".join)
"""Plausible blocks among the chaos, so complete bodies and closers are common."""

any_output = st.one_of(outputs, structured_outputs)


@st.composite
def chunkings(draw: st.DrawFn, text: str) -> list[str]:
    """Any split of text into chunks (empty chunks included)."""
    cuts = draw(st.lists(st.integers(0, len(text)), max_size=max(1, len(text))))
    edges = [0, *sorted(cuts), len(text)]
    return [text[a:b] for a, b in itertools.pairwise(edges)]
