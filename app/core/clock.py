"""The one source of the current time. Code that decides on a deadline takes a `Clock`
instead of reading this directly, so tests move time by hand instead of sleeping."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

#: Returns now, timezone-aware UTC.
Clock = Callable[[], dt.datetime]


def utcnow() -> dt.datetime:
    """Now, timezone-aware UTC: the only kind of datetime the store accepts."""
    return dt.datetime.now(dt.UTC)


def iso_utc(moment: dt.datetime) -> str:
    """`2026-11-22T10:31:52.399Z`: the one time format of the API and the metadata."""
    text = moment.astimezone(dt.UTC).isoformat(timespec="milliseconds")
    return text.replace("+00:00", "Z")
