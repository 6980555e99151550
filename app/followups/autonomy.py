"""Per-thread autonomy settings: validation of a PATCH, the effective values (thread over
defaults), and the cap on consecutive follow-ups. Pure.

Stored in `threads.autonomy` (JSON) as only what the user set; the defaults come from the
settings (`autonomy_enabled`, `autonomy_idle_seconds`, `autonomy_max_followups`) at read time,
so changing a default reaches every thread that never overrode it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeGuard

MIN_IDLE_SECONDS = 1
MAX_IDLE_SECONDS = 30 * 24 * 3600
MAX_FOLLOWUPS_LIMIT = 100
FIELDS = ("enabled", "idle_seconds", "max_followups")


class InvalidAutonomy(ValueError):
    """A PATCH body the API answers with 422; the message names the field."""


@dataclass(frozen=True)
class Autonomy:
    """What a thread does on its own."""

    enabled: bool
    idle_seconds: int
    max_followups: int

    def as_json(self) -> dict[str, Any]:
        return {"enabled": self.enabled, "idle_seconds": self.idle_seconds,
                "max_followups": self.max_followups}


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def validate_patch(patch: Any) -> dict[str, Any]:
    """The `autonomy` object of a PATCH, checked strictly (a string "true" is not a bool).
    Returns only the fields given; raises InvalidAutonomy."""
    if not isinstance(patch, dict):
        raise InvalidAutonomy("'autonomy' must be an object")
    unknown = sorted(set(patch) - set(FIELDS))
    if unknown:
        raise InvalidAutonomy(f"unknown autonomy field(s): {', '.join(unknown)}")
    if not patch:
        raise InvalidAutonomy(f"'autonomy' must set at least one of {', '.join(FIELDS)}")
    if "enabled" in patch and not isinstance(patch["enabled"], bool):
        raise InvalidAutonomy("'autonomy.enabled' must be true or false")
    if "idle_seconds" in patch:
        idle = patch["idle_seconds"]
        if not _is_int(idle) or not MIN_IDLE_SECONDS <= idle <= MAX_IDLE_SECONDS:
            raise InvalidAutonomy(
                f"'autonomy.idle_seconds' must be an integer from {MIN_IDLE_SECONDS} "
                f"to {MAX_IDLE_SECONDS}"
            )
    if "max_followups" in patch:
        cap = patch["max_followups"]
        if not _is_int(cap) or not 0 <= cap <= MAX_FOLLOWUPS_LIMIT:
            raise InvalidAutonomy(
                f"'autonomy.max_followups' must be an integer from 0 to {MAX_FOLLOWUPS_LIMIT}"
            )
    return dict(patch)


def effective(stored: Mapping[str, Any] | None, defaults: Autonomy) -> Autonomy:
    """The thread's values over the defaults; a malformed stored value falls back to its
    default (stored rows outlive validation rules)."""
    stored = stored or {}
    enabled = stored.get("enabled")
    idle = stored.get("idle_seconds")
    cap = stored.get("max_followups")
    return Autonomy(
        enabled=enabled if isinstance(enabled, bool) else defaults.enabled,
        idle_seconds=idle if _is_count(idle, MIN_IDLE_SECONDS) else defaults.idle_seconds,
        max_followups=cap if _is_count(cap, 0) else defaults.max_followups,
    )


def _is_count(value: Any, minimum: int) -> TypeGuard[int]:
    return _is_int(value) and value >= minimum


def cap_reached(consecutive_followups: int, max_followups: int) -> bool:
    """True when the thread already had max_followups follow-ups since the user last wrote."""
    return consecutive_followups >= max_followups
