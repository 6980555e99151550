"""What counts as a corrupted message, rule by rule (pure: no SQL, no I/O).

Assistant messages: a stored text that still holds a marker header is corrupt; every current
write goes through the MarkerFilter, whose output never contains one (spec invariant "No leak").
The filter itself says which kind of block it removed, so detection and fixing cannot disagree:

- `context_echo`      an echoed MSG_CONTEXT block;
- `unclosed_metadata` a METADATA block without a clean closer (unclosed, unterminated,
                      truncated, garbled or oversized);
- `marker_header`     any other marker left in the text (a well-formed METADATA block).

`unclosed_comment` (a `<!--` outside Markdown code with no `-->` after it, not a marker) is a
notice, never fixed: the text is the model's own words and is shown as text (docs/repair.md).

User messages: `legacy_synthetic` is a follow-up prompt stored by an old gateway
(`[AUTONOMOUS_FOLLOWUP: <trigger>]...`) with no synthetic flag at all.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from app.repair.code_spans import mask_code
from app.repair.rows import StoredMessage
from app.sanitize import clean_text
from app.stream import FilterResult, strip_markers
from app.stream.spec import HEADER
from app.synthetic import LEGACY_SYNTHETIC_PREFIX, is_legacy_synthetic, is_synthetic_metadata

MARKER_HEADER: Final = "marker_header"
UNCLOSED_METADATA: Final = "unclosed_metadata"
CONTEXT_ECHO: Final = "context_echo"
LEGACY_SYNTHETIC: Final = "legacy_synthetic"
UNCLOSED_COMMENT: Final = "unclosed_comment"

FIX_RULES: Final = (MARKER_HEADER, UNCLOSED_METADATA, CONTEXT_ECHO, LEGACY_SYNTHETIC)
"""Rules whose rows `fix` rewrites; `--check` fails on these."""
NOTICE_RULES: Final = (UNCLOSED_COMMENT,)
"""Rules that are reported only."""

LEGACY_TRIGGER: Final = re.compile(r"\[AUTONOMOUS_FOLLOWUP:[ \t]*([^\]\s]{1,64})[ \t]*\]")
UNKNOWN_TRIGGER: Final = "unknown"

_ENDING_WARNINGS: Final = frozenset(
    {"unclosed_block", "garbled_block", "unterminated_block", "truncated_block",
     "oversized_block"}
)
_COMMENT_OPEN: Final = "<!--"
_COMMENT_CLOSE: Final = "-->"


@dataclass(frozen=True, slots=True)
class Diagnosis:
    """What is wrong with one message: rules to fix, notices to report, and the filter's
    result on the stored text when a marker was found (the fix reuses it)."""

    rules: tuple[str, ...]
    notices: tuple[str, ...]
    filtered: FilterResult | None = None

    @property
    def needs_fix(self) -> bool:
        return bool(self.rules)

    @property
    def is_clean(self) -> bool:
        return not self.rules and not self.notices


CLEAN: Final = Diagnosis((), ())


def marker_rules(result: FilterResult) -> tuple[str, ...]:
    """The rules a marker-bearing text breaks, named from the blocks the filter removed."""
    rules: list[str] = []
    if any(r.marker == "MSG_CONTEXT" for r in result.records):
        rules.append(CONTEXT_ECHO)
    if any(r.marker == "METADATA" and r.kind in _ENDING_WARNINGS for r in result.records):
        rules.append(UNCLOSED_METADATA)
    return tuple(rules) or (MARKER_HEADER,)


def unclosed_comment_offsets(text: str) -> list[int]:
    """Offsets of each `<!--` outside code that no later `-->` (outside code) closes and that
    is not a marker header. Only the last opener can lack a closer, so at most one offset."""
    if _COMMENT_OPEN not in text:
        return []
    masked = mask_code(text)
    opener = masked.rfind(_COMMENT_OPEN)
    while opener != -1:
        if masked.find(_COMMENT_CLOSE, opener + len(_COMMENT_OPEN)) != -1:
            return []
        if not HEADER.match(text, opener):
            return [opener]
        opener = masked.rfind(_COMMENT_OPEN, 0, opener)
    return []


def is_unflagged_legacy_prompt(message: StoredMessage) -> bool:
    """Legacy follow-up prompt with no flag anywhere (column, metadata, trigger column).
    Partly flagged rows are hidden already and left alone: their rollback could not be exact."""
    return (
        message.role == "user"
        and is_legacy_synthetic(message.content, message.metadata)
        and message.synthetic is False
        and message.trigger_type is None
        and not is_synthetic_metadata(message.metadata)
    )


def legacy_trigger(content: str) -> tuple[str, str | None]:
    """(trigger_type, reason) parsed from `[AUTONOMOUS_FOLLOWUP: <trigger>] <reason>`."""
    match = LEGACY_TRIGGER.match(content)
    if match is not None:
        return match.group(1), content[match.end():].strip() or None
    rest = content[len(LEGACY_SYNTHETIC_PREFIX):]
    _, bracket, after = rest.partition("]")
    return UNKNOWN_TRIGGER, (after if bracket else rest).strip() or None


def diagnose(message: StoredMessage) -> Diagnosis:
    """Every rule the message breaks. Clean rows come back as CLEAN."""
    if message.role == "user":
        return Diagnosis((LEGACY_SYNTHETIC,), ()) if is_unflagged_legacy_prompt(message) else CLEAN
    content = clean_text(message.content)  # as the store will write it (see app.sanitize)
    if message.role != "assistant" or _COMMENT_OPEN not in content:
        return CLEAN
    filtered = strip_markers(content) if HEADER.search(content) else None
    rules = marker_rules(filtered) if filtered is not None else ()
    notices = (UNCLOSED_COMMENT,) if unclosed_comment_offsets(content) else ()
    if not rules and not notices:
        return CLEAN
    return Diagnosis(rules, notices, filtered)
