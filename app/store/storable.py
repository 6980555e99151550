"""Content and metadata made storable at the last step before a write (the rules are in
app.core.cleaning, pure, so the stream path can apply them before filtering)."""

from __future__ import annotations

from typing import Any

from app.core.cleaning import SanitizeReport, clean_json, clean_text


def clean_message(content: str, metadata: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """Content and metadata ready to store, the metadata noting what sanitising changed."""
    report = SanitizeReport()
    clean_content = clean_text(content, report)
    clean_meta = clean_json(metadata, report)
    return clean_content, report.merge_into(clean_meta)
