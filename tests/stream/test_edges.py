"""Edge cases named in the issue: each pinned to its expected result under many splits."""

from __future__ import annotations

import json
from typing import Any

import pytest

from app.stream import MAX_BODY, MarkerFilter, strip_markers
from tests.stream.oracle import reference
from tests.stream.streaming import one_char_chunks, random_chunkings, stream, two_way_splits


def expect(
    text: str,
    visible: str,
    metadata: dict[str, Any] | None = None,
    warnings: list[str] | None = None,
    *,
    all_splits: bool = True,
) -> None:
    """text gives (visible, metadata, warnings) as one chunk, one character at a time,
    every two-way split (if asked) and seeded random chunkings; the oracle agrees."""
    want = (visible, metadata, warnings or [])
    oracle = reference(text)
    assert (oracle.text, oracle.metadata, oracle.warnings) == want
    chunkings = [[text], one_char_chunks(text), *random_chunkings(text, seed=1, count=10)]
    if all_splits:
        chunkings.extend(two_way_splits(text))
    for chunks in chunkings:
        got = stream(chunks, expected_text=visible)
        assert (got.text, got.metadata, got.warnings) == want, f"chunks={chunks!r}"


CLOSED = 'A <!-- METADATA: {"a": 1}'


@pytest.mark.parametrize("closer", [" -->", "-->", "\n-->", " --->", "\t" * 16 + "-" * 10 + ">"])
def test_closer_split_at_every_position(closer: str) -> None:
    expect(CLOSED + closer + " B", "A  B", {"a": 1})


def test_eleven_dashes_are_no_closer() -> None:
    expect(CLOSED + " ----------->B", "A  ----------->B", {"a": 1}, ["unclosed_block"])


def test_sixteen_ws_before_a_closer_close_but_seventeen_do_not() -> None:
    expect(CLOSED + " " * 16 + "-->B", "A B", {"a": 1})
    expect(CLOSED + " " * 17 + "-->B", "A " + " " * 17 + "-->B", {"a": 1}, ["unclosed_block"])


def test_closer_cut_off_by_the_end_of_the_stream_is_unclosed() -> None:
    expect(CLOSED + " --", "A  --", {"a": 1}, ["unclosed_block"])


def test_more_than_16_ws_after_the_opening_means_no_header() -> None:
    text = "A <!--" + " " * 17 + "METADATA: {} --> B"
    expect(text, text)


def test_more_than_16_ws_after_the_keyword_are_taken_by_the_second_ws_run() -> None:
    # The regex's first WS run takes 16, `:?` matches nothing, the last run takes the rest.
    expect("A <!-- METADATA" + " " * 17 + '{"a": 1} --> B', "A  B", {"a": 1})
    expect("A <!-- METADATA" + " " * 32 + '{"a": 1} --> B', "A  B", {"a": 1})
    # ...so a colon after 17 WS is not part of the header: the body starts at `:`.
    expect("A <!-- METADATA" + " " * 17 + ': {"a": 1} --> B', "A  B", None, ["garbled_block"])


def test_more_than_16_ws_after_the_colon_leave_ws_at_the_body_start() -> None:
    expect("A <!-- METADATA:" + " " * 16 + '{"a": 1} --> B', "A  B", {"a": 1})
    expect("A <!-- METADATA:" + " " * 17 + '{"a": 1} --> B', "A  B", None, ["garbled_block"])


def test_header_ws_and_colon_split_across_chunks() -> None:
    expect('A <!--\t METADATA \r\n : \n {"k": 1} --> B', "A  B", {"k": 1})
    expect('A <!--msg_context:{"k": 1}-->B', "A B", None, ["context_echo"])


def test_header_opening_at_the_very_end_stays_visible() -> None:
    expect("Text <!--", "Text <!--")
    expect("Text <!--  \n", "Text <!--")


def test_keyword_followed_by_a_word_character_is_still_a_header() -> None:
    # The regex is the definition: nothing after the keyword is required, so
    # `<!-- METADATA_x` is a header whose body is invalid at `_` (the spec's prose suggests
    # `<!-- METADATA_` stays plain text; the regex says otherwise).
    expect("Text <!-- METADATA_x", "Text _x", None, ["unterminated_block"])
    expect("Text <!-- MSG_CONTEXTUAL -->y", "Text y", None, ["context_echo", "garbled_block"])


def test_keyword_at_the_very_end_is_a_truncated_block() -> None:
    expect("Text <!-- metadata", "Text", None, ["truncated_block"])
    expect("Text <!-- MSG_CONTEXT : ", "Text", None, ["context_echo", "truncated_block"])


def test_keyword_case_folding_is_ascii_only() -> None:
    text = "A <!-- MſG_CONTEXT: {} --> B"  # U+017F folds to `s` only under Unicode rules
    expect(text, text)


def garbled_at(distance: int) -> str:
    """A body broken at b (`x`), with `-->` starting `distance` characters after b."""
    return "<!-- METADATA: x" + "y" * (distance - 1) + "--> tail"


def test_garble_window_hit_at_the_last_allowed_position() -> None:
    expect(garbled_at(1023), "tail", None, ["metadata_at_start", "garbled_block"], all_splits=False)


def test_garble_window_miss_one_position_later() -> None:
    text = garbled_at(1024)
    expect(
        text,
        text[len("<!-- METADATA: ") :],
        None,
        ["metadata_at_start", "unterminated_block"],
        all_splits=False,
    )


def test_garble_window_miss_rescans_for_headers() -> None:
    text = "<!-- METADATA: x" + "y" * 1100 + '<!-- METADATA: {"k": 2} --> end'
    visible = "x" + "y" * 1100 + " end"
    expect(text, visible, {"k": 2}, ["metadata_at_start", "unterminated_block"], all_splits=False)


def body_of(length: int, closed: bool) -> str:
    """A METADATA body of exactly `length` characters: complete, or still open."""
    filler = "z" * (length - len('{"k": ""}') + (0 if closed else 1))
    return '{"k": "' + filler + ('"}' if closed else '"')


def test_body_completing_at_exactly_max_body_is_complete() -> None:
    body = body_of(MAX_BODY, closed=True)
    assert len(body) == MAX_BODY
    value = json.loads(body)
    expect(f"A <!-- METADATA: {body} --> B", "A  B", value, all_splits=False)


def test_body_still_open_after_max_body_is_oversized() -> None:
    body = body_of(MAX_BODY, closed=False)
    assert len(body) == MAX_BODY
    expect(f"A <!-- METADATA: {body}}} --> B", "A  B", None, ["oversized_block"], all_splits=False)
    expect(f"A <!-- METADATA: {body}}} B", "A } B", None, ["oversized_block"], all_splits=False)


def test_open_body_ending_with_the_stream_at_exactly_max_body_is_oversized() -> None:
    # Both "truncated" and "oversized" describe this; the filter decides when the limit is
    # reached, before it can know the stream ends, so it reports oversized_block.
    body = body_of(MAX_BODY, closed=False)
    expect(f"A <!-- METADATA: {body}", "A", None, ["oversized_block"], all_splits=False)
    expect(f"A <!-- METADATA: {body[:-1]}", "A", None, ["truncated_block"], all_splits=False)


def test_headers_inside_json_strings_are_part_of_the_body() -> None:
    text = '<!-- MSG_CONTEXT: {"a": "<!-- METADATA: {\\"x\\": 1} -->"} --> Hi'
    expect(text, "Hi", None, ["context_echo"])


@pytest.mark.parametrize("body", ["[1]", '"s"', "1", "null", "{]", "{'a': 1}"])
def test_metadata_body_that_is_not_an_object_is_invalid(body: str) -> None:
    expect(f"<!-- METADATA: {body} --> x", "x", None, ["metadata_at_start", "garbled_block"])


def test_crlf_around_and_inside_markers() -> None:
    text = 'A\r\n<!--\r\nMETADATA\r\n:\r\n{\r\n"k":\r\n1\r\n}\r\n-->\r\nB\r\n'
    expect(text, "A\r\n\r\nB", {"k": 1})


def test_unicode_whitespace_is_not_ws() -> None:
    expect("\u00a0A\u00a0\x0b", "\u00a0A\u00a0\x0b")
    expect("A <!--\u00a0METADATA: {} --> B", "A <!--\u00a0METADATA: {} --> B")


def test_whitespace_streams_only_between_visible_text() -> None:
    f = MarkerFilter()
    assert f.feed(" \n") == ""
    assert f.feed("Hi  ") == "Hi"
    assert f.pending_ws == 2
    assert f.feed("\n") == ""
    assert f.feed("there") == "  \nthere"
    assert f.feed(" \t") == ""
    assert f.close() == ""


def test_metadata_at_start_ignores_leading_ws_and_removed_blocks() -> None:
    expect(' \n<!-- METADATA: {"a": 1} -->Hi', "Hi", {"a": 1}, ["metadata_at_start"])
    expect('Hi <!-- METADATA: {"a": 1} -->', "Hi", {"a": 1})


def test_later_metadata_keys_win_and_context_is_discarded() -> None:
    text = (
        '<!-- METADATA: {"a": 1, "b": 1} --> x <!-- MSG_CONTEXT: {"a": 9} --> '
        '<!-- METADATA: {"b": 2, "c": [1]} -->'
    )
    expect(text, "x", {"a": 1, "b": 2, "c": [1]}, ["metadata_at_start", "context_echo"])


def test_records_locate_each_block_in_the_stream() -> None:
    block = '<!-- MSG_CONTEXT: {"h": []} -->'
    text = "ab " + block + " cd <!-- METADATA: oops"
    f = MarkerFilter()
    for chunk in one_char_chunks(text):
        f.feed(chunk)
    f.close()
    start = text.index("<!-- METADATA")
    broken = text.index("oops")
    assert [(r.kind, r.marker, r.offset, r.end) for r in f.records] == [
        ("context_echo", "MSG_CONTEXT", 3, 3 + len(block)),
        ("unterminated_block", "METADATA", start, broken),
    ]
    # one character a chunk: the header is recognised on the keyword's last letter
    assert f.records[0].chunk_index == text.index("MSG_CONTEXT") + len("MSG_CONTEXT") - 1
    assert f.records[1].log_fields()["offset"] == start
    assert f.chunks_fed == len(text) and f.chars_fed == len(text)


def test_deeply_nested_metadata_is_decoded() -> None:
    depth = 20_000
    body = '{"a": ' + "[" * depth + "]" * depth + ', "b": {"c": [true, null, -1.5e2]}}'
    result = strip_markers(f"x <!-- METADATA: {body} -->")
    assert result.text == "x" and result.warnings == []
    assert result.metadata is not None and result.metadata["b"] == {"c": [True, None, -150.0]}
    inner = result.metadata["a"]
    for _ in range(depth - 1):
        inner = inner[0]
    assert inner == []


def test_numbers_python_cannot_hold_keep_their_text() -> None:
    digits = "9" * 5000
    result = strip_markers(f'x <!-- METADATA: {{"big": {digits}, "huge": 1e400, "n": 7}} -->')
    assert result.metadata == {"big": digits, "huge": "1e400", "n": 7}
    json.dumps(result.metadata, allow_nan=False)  # always storable as strict JSON


def test_spec_joins_visible_pieces_even_when_they_spell_a_header() -> None:
    # Spec v1, final step: visible pieces are joined after the blocks are removed. Two
    # pieces around a removed block can therefore spell a marker; the rules keep it, and
    # so does the filter (reported upstream as a gap between the rules and "no leak").
    text = '<!-<!-- MSG_CONTEXT: {} -->- METADATA: {"a": 1} -->'
    expect(text, '<!-- METADATA: {"a": 1} -->', None, ["context_echo"])


def test_feed_after_close_is_an_error() -> None:
    f = MarkerFilter()
    assert f.feed("x ") == "x"
    assert f.close() == ""
    assert f.close() == ""
    with pytest.raises(ValueError):
        f.feed("y")
