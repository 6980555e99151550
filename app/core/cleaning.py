"""Make text and metadata storable on both backends without silently changing them.

PostgreSQL rejects NUL in text and JSONB; UTF-8 cannot encode lone surrogates; JSON has no NaN.
Each is replaced on write and counted, and the counts are noted in the message metadata under
`sanitized`, so a changed message says that it was changed. Everything else round-trips exactly.

Model text is cleaned *before* the marker filter, never after: removing a NUL can join `<!-`
and `-` into a marker start, which a filter that saw the NUL would have let through.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from app.stream import FilterResult, strip_markers

_SURROGATE = re.compile("[\ud800-\udfff]")
REPLACEMENT_CHAR = "\ufffd"


@dataclass(slots=True)
class SanitizeReport:
    """What was changed while sanitising, to be recorded in metadata."""

    counts: dict[str, int] = field(default_factory=dict)

    def add(self, what: str, n: int) -> None:
        if n:
            self.counts[what] = self.counts.get(what, 0) + n

    def merge_into(self, metadata: dict[str, Any]) -> dict[str, Any]:
        """Metadata with the counts added under `sanitized` (unchanged when nothing changed)."""
        if not self.counts:
            return metadata
        noted = dict(metadata.get("sanitized") or {}) if isinstance(
            metadata.get("sanitized"), dict) else {}
        for what, n in self.counts.items():
            previous = noted.get(what, 0)
            noted[what] = (previous if isinstance(previous, int) else 0) + n
        return {**metadata, "sanitized": noted}


def clean_text(value: str, report: SanitizeReport | None = None) -> str:
    """Remove NUL and replace lone surrogates by U+FFFD (counted in `report` if given)."""
    report = report if report is not None else SanitizeReport()
    if "\x00" in value:
        report.add("nul_removed", value.count("\x00"))
        value = value.replace("\x00", "")
    value, replaced = _SURROGATE.subn(REPLACEMENT_CHAR, value)
    report.add("surrogates_replaced", replaced)
    return value


def replace_surrogates(value: Any) -> Any:
    """A parsed JSON value with every lone surrogate (keys too) replaced by U+FFFD and
    nothing else changed. JSON may spell one (`"\\ud800"`) and Python's parser accepts it,
    but no UTF-8 text can hold it: a request body is made writable at the door, as the store
    would write it, instead of failing wherever it is first encoded."""
    if isinstance(value, str):
        return _SURROGATE.sub(REPLACEMENT_CHAR, value)
    if isinstance(value, dict):
        return {replace_surrogates(k): replace_surrogates(v) for k, v in value.items()}
    if isinstance(value, list):
        return [replace_surrogates(v) for v in value]
    return value


def clean_json(value: Any, report: SanitizeReport) -> Any:
    """clean_text applied to every string (keys too) of a JSON value; NaN/inf become null."""
    if isinstance(value, str):
        return clean_text(value, report)
    if isinstance(value, dict):
        return {clean_text(str(k), report): clean_json(v, report) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [clean_json(v, report) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        report.add("non_finite_replaced", 1)
        return None
    return value


def clean_and_strip_markers(raw: str) -> FilterResult:
    """The storable visible text of a whole model output (a title, a summary, a provider's
    error, a stored row): cleaned first, then filtered, so nothing the store would remove
    can hide a marker."""
    return strip_markers(clean_text(raw))
