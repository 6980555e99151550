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

`reasoning_split` (only when a run is asked to re-split, with the gateway's reasoning format)
is an answer stored by a gateway from before the reasoning split whose content still begins
with its thinking block (`<think>...</think>Answer`): the one split (app.stream.
split_reasoning) says what is reasoning. Only rows with no reasoning yet, and only a block
that closes: an unclosed one would leave the answer empty, so it is left as the user saw it.

`tool_call_split` (only when a run is asked to re-split with a tool format, CHATGATE_TOOL_FORMAT)
is an answer stored by a gateway from before that format whose text still holds inline tool
call blocks (`<tool_call>{"name": ...}</tool_call>`): the one split says what is a call; the
calls move into the row's `metadata.tool_calls`, as a request that offered tools stores them
today, and the text keeps the rest. Only rows with no `tool_calls` yet and at least one call.

User messages: `legacy_synthetic` is a follow-up prompt stored by an old gateway
(`[AUTONOMOUS_FOLLOWUP: <trigger>]...`) with no synthetic flag at all.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from app.core.cleaning import clean_text
from app.core.synthetic import LEGACY_SYNTHETIC_PREFIX, is_legacy_synthetic, is_synthetic_metadata
from app.repair.code_spans import mask_code
from app.repair.rows import Resplit, StoredMessage
from app.stream import FilterResult, strip_markers
from app.stream.reasoning import REASONING_UNCLOSED, SplitResult, split_reasoning
from app.stream.spec import HEADER

MARKER_HEADER: Final = "marker_header"
UNCLOSED_METADATA: Final = "unclosed_metadata"
CONTEXT_ECHO: Final = "context_echo"
LEGACY_SYNTHETIC: Final = "legacy_synthetic"
REASONING_SPLIT: Final = "reasoning_split"
TOOL_CALL_SPLIT: Final = "tool_call_split"
UNCLOSED_COMMENT: Final = "unclosed_comment"

FIX_RULES: Final = (MARKER_HEADER, UNCLOSED_METADATA, CONTEXT_ECHO, LEGACY_SYNTHETIC,
                    REASONING_SPLIT, TOOL_CALL_SPLIT)
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
    #: Both channels of a content to re-split (rule `reasoning_split`), and its inline tool
    #: calls (rule `tool_call_split`).
    split: SplitResult | None = None

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


def stored_split(message: StoredMessage, content: str, resplit: Resplit | None
                 ) -> SplitResult | None:
    """The split of a stored answer that still holds a closed leading thinking block; None
    when there is nothing to move (no re-split asked, reasoning stored already, no block,
    or a block that never closes)."""
    if (resplit is None or resplit.reasoning_format == "none" or message.reasoning is not None
            or f"</{resplit.tag}>" not in content):
        return None
    split = split_reasoning(content, reasoning_format=resplit.reasoning_format,
                            tag=resplit.tag)
    if REASONING_UNCLOSED in split.warnings or split.text == strip_markers(content).text:
        return None  # unclosed, or no leading block taken: the text is the answer
    return split


def stored_call_split(message: StoredMessage, content: str, resplit: Resplit | None, *,
                      thinking: bool) -> SplitResult | None:
    """The split of a stored answer whose text still holds inline tool calls (with its
    thinking moved too when `thinking`); None when there is nothing to move (no tool format
    asked, calls stored already, or no block that is a call)."""
    if (resplit is None or resplit.tool_format == "none"
            or f"<{resplit.tool_tag}>" not in content
            or (isinstance(message.metadata, dict) and message.metadata.get("tool_calls"))):
        return None
    split = split_reasoning(
        content, reasoning_format=resplit.reasoning_format if thinking else "none",
        tag=resplit.tag, tool_format=resplit.tool_format, tool_tag=resplit.tool_tag)
    return split if split.tool_calls else None


def diagnose(message: StoredMessage, resplit: Resplit | None = None) -> Diagnosis:
    """Every rule the message breaks. Clean rows come back as CLEAN."""
    if message.role == "user":
        return Diagnosis((LEGACY_SYNTHETIC,), ()) if is_unflagged_legacy_prompt(message) else CLEAN
    if message.role != "assistant":
        return CLEAN
    content = clean_text(message.content)  # as the store will write it (see app.core.cleaning)
    split = stored_split(message, content, resplit)
    thinking = split is not None
    calls = stored_call_split(message, content, resplit, thinking=thinking)
    split = calls or split
    if _COMMENT_OPEN not in content and split is None:
        return CLEAN
    filtered = strip_markers(content) if HEADER.search(content) else None
    rules = marker_rules(filtered) if filtered is not None else ()
    if thinking:
        rules += (REASONING_SPLIT,)
    if calls is not None:
        rules += (TOOL_CALL_SPLIT,)
    notices = (UNCLOSED_COMMENT,) if unclosed_comment_offsets(content) else ()
    if not rules and not notices:
        return CLEAN
    return Diagnosis(rules, notices, filtered, split)
