"""Which text the memory search looks for, and where it came from. Pure.

A real message is its own query. A synthetic prompt ("Continue our conversation naturally.")
says nothing about the conversation, so the search uses what the user last wrote, else the
thread summary; with neither there is nothing to search for."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

QuerySourceName = Literal["current_message", "last_user_message", "summary"]


@dataclass(frozen=True)
class QuerySource:
    name: QuerySourceName
    text: str


def choose_query_source(
    *, current_text: str, current_is_synthetic: bool, last_real_user_text: str | None,
    summary: str | None,
) -> QuerySource | None:
    """The query for this turn's memory search, or None (empty thread: no retrieval)."""
    if not current_is_synthetic and current_text.strip():
        return QuerySource("current_message", current_text)
    if last_real_user_text and last_real_user_text.strip():
        return QuerySource("last_user_message", last_real_user_text)
    if summary and summary.strip():
        return QuerySource("summary", summary)
    return None
