"""The one-shot form of the filter, for stored or replayed text."""

from __future__ import annotations

from typing import NamedTuple

from app.stream.decode import JsonObject
from app.stream.filter import FilterWarning, MarkerFilter


class FilterResult(NamedTuple):
    """What the filter makes of a whole model output."""

    text: str
    metadata: JsonObject | None
    warnings: list[str]
    records: list[FilterWarning]


def strip_markers(text: str) -> FilterResult:
    """Filter a whole output at once: the same MarkerFilter, fed one chunk."""
    marker_filter = MarkerFilter()
    visible = marker_filter.feed(text) + marker_filter.close()
    return FilterResult(
        visible, marker_filter.metadata, marker_filter.warnings, marker_filter.records
    )
