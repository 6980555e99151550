"""What marks a user message as synthetic (a follow-up prompt), in pure Python: the store's
visibility rules and the repair rules share these, so they cannot drift apart."""

from __future__ import annotations

from typing import Any, Final

#: Older gateways stored follow-up prompts as plain user messages starting with this.
LEGACY_SYNTHETIC_PREFIX: Final = "[AUTONOMOUS_FOLLOWUP:"


def is_synthetic_metadata(metadata: Any) -> bool:
    """Metadata marks a synthetic message: `synthetic` is exactly `True` (not "true", not 1)."""
    return isinstance(metadata, dict) and metadata.get("synthetic") is True


def is_declared_real(metadata: Any) -> bool:
    """Metadata says `synthetic` is exactly `False`: this gateway stored the message as one a
    user wrote, so legacy-looking content cannot hide it."""
    return isinstance(metadata, dict) and metadata.get("synthetic") is False


def real_user_metadata(content: str) -> dict[str, Any]:
    """Metadata of a message a user wrote. Content that starts like a legacy follow-up prompt
    says `synthetic: false` outright: without it the legacy rule would hide the user's own
    words from their history, and a repair would flag them as synthetic."""
    return {"synthetic": False} if content.startswith(LEGACY_SYNTHETIC_PREFIX) else {}


def is_legacy_synthetic(content: str, metadata: Any) -> bool:
    """A follow-up prompt an older gateway stored as plain text: the legacy prefix, and no
    statement from this gateway that a user wrote it."""
    return content.startswith(LEGACY_SYNTHETIC_PREFIX) and not is_declared_real(metadata)
