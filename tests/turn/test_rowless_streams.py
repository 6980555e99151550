"""The per-process count of a user's calls without a thread."""

from __future__ import annotations

from app.turn.rowless_streams import RowlessStreams


def test_each_hold_counts_until_released_once() -> None:
    streams = RowlessStreams()
    first, second = streams.hold("alice"), streams.hold("alice")
    streams.hold("bob")
    assert (streams.count("alice"), streams.count("bob"), streams.count("carol")) == (2, 1, 0)
    first.release()
    first.release()  # a call finished from two places is still one stream
    assert streams.count("alice") == 1
    second.release()
    assert streams.count("alice") == 0
