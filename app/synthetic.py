"""What marks a user message as synthetic (a follow-up prompt), in pure Python: the store's
visibility rules and the repair rules share these, so they cannot drift apart."""

from __future__ import annotations

from typing import Any, Final

#: Older gateways stored follow-up prompts as plain user messages starting with this.
LEGACY_SYNTHETIC_PREFIX: Final = "[AUTONOMOUS_FOLLOWUP:"


def is_synthetic_metadata(metadata: Any) -> bool:
    """Metadata marks a synthetic message: `synthetic` is exactly `True` (not "true", not 1)."""
    return isinstance(metadata, dict) and metadata.get("synthetic") is True
