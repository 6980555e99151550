"""Property tests: MarkerFilter against the reference oracle, under hostile input."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from app.stream import strip_markers
from tests.stream.hostile import any_output, chunkings
from tests.stream.oracle import HEADER, WS, reference
from tests.stream.streaming import one_char_chunks, plain_hold_ok, stream
from tests.support.properties import property_settings

MAIN = property_settings(max_examples=3000)
SIDE = property_settings(max_examples=2000)


@MAIN
@given(data=st.data(), text=any_output)
def test_filter_matches_the_reference_under_any_chunking(data: st.DataObject, text: str) -> None:
    want = reference(text)
    chunks = data.draw(chunkings(text))
    got = stream(chunks, expected_text=want.text)  # also checks prefix and hold-back
    assert (got.text, got.metadata, got.warnings) == (want.text, want.metadata, want.warnings)
    assert got.spans == [
        (warning, block.start, block.end) for block in want.blocks for warning in block.warnings
    ]


@SIDE
@given(data=st.data(), text=any_output)
def test_chunking_does_not_matter(data: st.DataObject, text: str) -> None:
    whole = stream([text])
    for chunks in (data.draw(chunkings(text)), one_char_chunks(text)):
        got = stream(chunks, expected_text=whole.text)
        assert (got.text, got.metadata, got.warnings, got.spans) == (
            whole.text,
            whole.metadata,
            whole.warnings,
            whole.spans,
        )


@SIDE
@given(data=st.data(), text=any_output)
def test_streamed_equals_stored(data: st.DataObject, text: str) -> None:
    streamed = stream(data.draw(chunkings(text)))
    stored = strip_markers(text)
    assert streamed.text == stored.text
    assert (streamed.metadata, streamed.warnings) == (stored.metadata, stored.warnings)


@SIDE
@given(data=st.data(), text=any_output)
def test_no_header_leaks(data: st.DataObject, text: str) -> None:
    """The visible text holds no header match, except one the spec itself composes by
    joining two visible pieces around a removed block (see docs/markers.md)."""
    visible = stream(data.draw(chunkings(text))).text
    pieces = reference(text).pieces
    joined = "".join(pieces)
    lead = len(joined) - len(joined.lstrip(WS))
    junctions = set()
    position = 0
    for piece in pieces[:-1]:
        position += len(piece)
        junctions.add(position)
    for x in range(len(visible)):
        match = HEADER.match(visible, x)
        if match is not None:
            start, end = lead + x, lead + match.end()
            assert any(start < j < end for j in junctions), f"header leaked: {match.group()!r}"


@SIDE
@given(
    data=st.data(),
    text=st.lists(st.sampled_from(["a", " ", " " * 70, "<", "<!-", "-", "\n", "é"])),
)
def test_plain_text_is_held_back_at_most_63_characters(
    data: st.DataObject, text: list[str]
) -> None:
    output = "".join(text)
    plain_hold_ok(output, data.draw(chunkings(output)))
