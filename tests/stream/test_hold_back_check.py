"""The outside hold-back check of tests/stream/streaming.py against made-up filters.

A MarkerFilter that lied in its own counters would only be caught by HoldBackCheck, so the
check itself is held to the spec here: it fails an emitter that keeps too much, and passes
one that keeps only what the spec lets a filter keep.
"""

from __future__ import annotations

import pytest

from app.stream import GARBLE_WINDOW, MAX_BODY
from tests.stream.oracle import reference
from tests.stream.streaming import OVERALL_HOLD, HoldBackCheck, stream


def lagging(text: str, lag: int) -> None:
    """Feed text one character at a time to an emitter that is `lag` characters late."""
    check = HoldBackCheck(text)
    for fed in range(1, len(text) + 1):
        check.after_feed(fed, max(0, fed - lag))


def test_plain_text_may_lag_63_characters_but_not_64() -> None:
    lagging("x" * 200, 63)
    with pytest.raises(AssertionError, match="64 characters of plain text"):
        lagging("x" * 200, 64)


def test_a_ws_run_before_a_possible_header_is_exempt() -> None:
    text = "a" + " " * 100 + "<!-- MSG_CONTEX"
    HoldBackCheck(text).after_feed(len(text), emitted=1)


def test_a_ws_run_followed_by_visible_text_is_not_exempt() -> None:
    text = "a" + " " * 100 + "b<!--"
    with pytest.raises(AssertionError, match="plain text"):
        HoldBackCheck(text).after_feed(len(text), emitted=1)


def test_after_a_closed_block_the_text_before_it_must_be_out() -> None:
    text = "x" * 100 + '<!-- METADATA: {"a": 1} -->'
    HoldBackCheck(text).after_feed(len(text), emitted=100)
    with pytest.raises(AssertionError, match="plain text"):
        HoldBackCheck(text).after_feed(len(text), emitted=0)


def test_after_a_failed_closer_the_prose_is_plain_text() -> None:
    head = 'A <!-- METADATA: {"a": 1} -x'
    text = head + "b" * 100
    HoldBackCheck(text).after_feed(len(head) - 1, emitted=1)  # closer still possible
    with pytest.raises(AssertionError, match="plain text"):
        HoldBackCheck(text).after_feed(len(text), emitted=1)


def test_prose_after_an_unterminated_block_waits_for_the_garble_window_only() -> None:
    header = "<!-- METADATA: "
    text = header + "y" * 3000
    p = len(header)
    check = HoldBackCheck(text)
    check.after_feed(p + GARBLE_WINDOW + 1, emitted=0)  # a `-->` could still start
    with pytest.raises(AssertionError, match="plain text"):
        check.after_feed(p + GARBLE_WINDOW + 2, emitted=0)


def test_a_block_inside_an_open_garble_window_is_not_plain_text_yet() -> None:
    text = "<!-- METADATA: " + "y" * 300 + "<!-- METADATA: {}<!--"
    HoldBackCheck(text).after_feed(len(text), emitted=0)


def test_more_than_the_overall_bound_is_caught_anywhere() -> None:
    header = '<!-- METADATA: {"a": "'
    prose = "z " * (OVERALL_HOLD // 2 + 1000) + "z"
    text = header + "z" * MAX_BODY + prose  # oversized: what follows MAX_BODY is visible
    visible = len(reference(text).text)
    assert visible > OVERALL_HOLD
    HoldBackCheck(text).after_feed(len(text), emitted=visible - OVERALL_HOLD)
    with pytest.raises(AssertionError, match="held back"):
        HoldBackCheck(text).after_feed(len(text), emitted=0)


def test_the_marker_filter_passes_it() -> None:
    text = "x" * 100 + " " * 100 + "<!-- METADATA: {} -->" + "y" * 100
    assert stream(list(text)).text == "x" * 100 + " " * 100 + "y" * 100
