"""Marker-safe stream filtering: the single source of clean text (marker spec v1).

Pure: imports nothing of asyncio, starlette, sqlalchemy or httpx.
"""

from app.stream.decode import JsonObject
from app.stream.filter import FilterWarning, MarkerFilter
from app.stream.spec import GARBLE_WINDOW, MAX_BODY
from app.stream.strip import FilterResult, strip_markers

__all__ = [
    "GARBLE_WINDOW",
    "MAX_BODY",
    "FilterResult",
    "FilterWarning",
    "JsonObject",
    "MarkerFilter",
    "strip_markers",
]
