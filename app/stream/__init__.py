"""Marker-safe stream filtering: the single source of clean text (marker spec v1.3, with
the reasoning split and the inline tool call split).

Pure: imports nothing of asyncio, starlette, sqlalchemy or httpx.
"""

from app.stream.decode import JsonObject
from app.stream.filter import FilterWarning, MarkerFilter
from app.stream.reasoning import (
    REASONING_FORMATS,
    ReasoningFormat,
    ReasoningSplit,
    SplitResult,
    split_reasoning,
)
from app.stream.spec import GARBLE_WINDOW, MAX_BODY
from app.stream.strip import FilterResult, strip_markers
from app.stream.tools import TOOL_FORMATS, ToolCall, ToolCallSplit, ToolFormat

__all__ = [
    "GARBLE_WINDOW",
    "MAX_BODY",
    "REASONING_FORMATS",
    "TOOL_FORMATS",
    "FilterResult",
    "FilterWarning",
    "JsonObject",
    "MarkerFilter",
    "ReasoningFormat",
    "ReasoningSplit",
    "SplitResult",
    "ToolCall",
    "ToolCallSplit",
    "ToolFormat",
    "split_reasoning",
    "strip_markers",
]
