"""The pure rules: what is corrupt, what the fix writes, and that fixing twice changes nothing."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.repair import (
    CONTEXT_ECHO,
    LEGACY_SYNTHETIC,
    MARKER_HEADER,
    UNCLOSED_COMMENT,
    UNCLOSED_METADATA,
    StoredMessage,
    diagnose,
    plan_repair,
)
from app.repair.code_spans import code_spans, mask_code
from app.repair.report import RepairReport, changed_excerpts
from app.repair.rules import legacy_trigger, unclosed_comment_offsets
from app.stream import strip_markers
from app.stream.spec import HEADER


def message(content: str, role: str = "assistant", metadata: Any = None, *,
            synthetic: bool = False, trigger_type: str | None = None) -> StoredMessage:
    return StoredMessage(
        id=uuid.uuid4(), thread_id=uuid.uuid4(), user_id="alice", role=role, content=content,
        metadata={} if metadata is None else metadata, synthetic=synthetic,
        trigger_type=trigger_type, created_at=dt.datetime(2025, 1, 1, tzinfo=dt.UTC),
    )


@pytest.mark.parametrize(
    ("content", "rules"),
    [
        ('Answer.\n\n<!-- METADATA: {"language": "en"} -->', (MARKER_HEADER,)),
        ('<!-- METADATA: {"language": "cs"}Aha, chápu...', (UNCLOSED_METADATA,)),
        ("<!-- METADATA: Aha, chápu", (UNCLOSED_METADATA,)),
        ('Text <!-- METADATA: {"a": 1', (UNCLOSED_METADATA,)),
        ("<!-- METADATA: language=cs -->Aha", (UNCLOSED_METADATA,)),
        ('<!-- MSG_CONTEXT: {"history": []} -->\nHello', (CONTEXT_ECHO,)),
        ('<!-- MSG_CONTEXT: {"history": []} -->\n<!-- METADATA: {"language": "cs"}Aha',
         (CONTEXT_ECHO, UNCLOSED_METADATA)),
        ('<!--msg_context{"h": 1}-->Hi', (CONTEXT_ECHO,)),
        ("Code too: `<!-- METADATA: {} -->`", (MARKER_HEADER,)),
    ],
)
def test_marker_rules_name_what_the_filter_removed(content: str, rules: tuple[str, ...]) -> None:
    diagnosis = diagnose(message(content))
    assert diagnosis.rules == rules
    plan = plan_repair(message(content))
    assert plan is not None
    assert plan.new_content == strip_markers(content).text
    assert not HEADER.search(plan.new_content)


@pytest.mark.parametrize(
    "content",
    [
        "Plain answer.",
        "  Trailing white space is the model's own.  \n",
        "Plain <!-- comment --> stays",
        "Start a comment with `<!--` in HTML.",
        "Example:\n```html\n<!-- open\n```\nDone.",
        "~~~\n<!-- in a tilde fence\n~~~\n",
        "<!-- META-DATA: {} --> is not a header",
        "",
    ],
)
def test_clean_assistant_rows_are_left_alone(content: str) -> None:
    diagnosis = diagnose(message(content))
    assert diagnosis.is_clean
    assert plan_repair(message(content)) is None


def test_a_nul_hiding_a_marker_is_found_and_fixed() -> None:
    """The store removes NUL on write: the fix must be judged on the text as it will be
    stored, where `<!-` NUL `-` has become a marker start."""
    content = 'Hi <!-\x00- METADATA: {"language": "en"} -->'
    assert diagnose(message(content)).rules == (MARKER_HEADER,)
    plan = plan_repair(message(content))
    assert plan is not None and plan.new_content == "Hi"
    assert plan.new_metadata["response_metadata"] == {"language": "en"}


def test_user_and_system_rows_with_markers_are_the_users_words() -> None:
    for role in ("user", "system"):
        assert diagnose(message('What is <!-- METADATA: {"a": 1', role=role)).is_clean


def test_metadata_goes_into_empty_response_metadata_only() -> None:
    content = 'Hi <!-- METADATA: {"language": "de"} -->'
    empties: list[dict[str, Any]] = [{}, {"response_metadata": {}}, {"response_metadata": None}]
    for empty in empties:
        plan = plan_repair(message(content, metadata={**empty, "tokens": 3}))
        assert plan is not None
        assert plan.new_metadata == {"tokens": 3, "response_metadata": {"language": "de"}}
    kept = plan_repair(message(content, metadata={"response_metadata": {"language": "en"}}))
    assert kept is not None
    assert kept.new_metadata == {"response_metadata": {"language": "en"}}
    assert kept.new_content == "Hi"
    assert kept.notes  # the dropped metadata is reported, not silently lost


def test_plan_does_not_mutate_the_stored_metadata() -> None:
    stored = {"tokens": 3}
    plan = plan_repair(message('<!-- METADATA: {"a": 1} -->x', metadata=stored))
    assert plan is not None and plan.new_metadata is not stored
    assert stored == {"tokens": 3}


def test_non_object_metadata_is_replaced_by_an_object() -> None:
    plan = plan_repair(message('x <!-- METADATA: {"a": 1} -->', metadata=["legacy"]))
    assert plan is not None
    assert plan.new_metadata == {"response_metadata": {"a": 1}}


@pytest.mark.parametrize(
    ("content", "trigger", "reason"),
    [
        ("[AUTONOMOUS_FOLLOWUP: check_in] The user went quiet.", "check_in",
         "The user went quiet."),
        ("[AUTONOMOUS_FOLLOWUP:reminder]", "reminder", None),
        ("[AUTONOMOUS_FOLLOWUP:]", "unknown", None),
        ("[AUTONOMOUS_FOLLOWUP: two words] x", "unknown", "x"),
        ("[AUTONOMOUS_FOLLOWUP: no bracket", "unknown", "no bracket"),
    ],
)
def test_legacy_trigger_is_parsed(content: str, trigger: str, reason: str | None) -> None:
    assert legacy_trigger(content) == (trigger, reason)


def test_legacy_synthetic_rows_get_flags_and_keep_their_text() -> None:
    content = "[AUTONOMOUS_FOLLOWUP: check_in] The user went quiet."
    legacy = message(content, role="user", metadata={"x": 1})
    assert diagnose(legacy).rules == (LEGACY_SYNTHETIC,)
    plan = plan_repair(legacy)
    assert plan is not None
    assert plan.new_content == content
    assert plan.new_metadata == {"x": 1, "synthetic": True, "trigger_type": "check_in",
                                 "trigger_reason": "The user went quiet."}
    assert (plan.synthetic, plan.trigger_type) == (True, "check_in")


@pytest.mark.parametrize(
    ("metadata", "synthetic", "trigger_type"),
    [
        ({"synthetic": True, "trigger_type": "check_in"}, True, "check_in"),
        ({"synthetic": True}, False, None),     # flagged in metadata: hidden already
        ({}, True, None),                       # flagged in the column
        ({}, False, "check_in"),                # partly flagged: left alone (exact rollback)
    ],
)
def test_flagged_follow_ups_are_not_legacy(
    metadata: dict[str, Any], synthetic: bool, trigger_type: str | None
) -> None:
    row = message("[AUTONOMOUS_FOLLOWUP: check_in] hi", role="user", metadata=metadata,
                  synthetic=synthetic, trigger_type=trigger_type)
    assert diagnose(row).is_clean


def test_legacy_flag_is_strict_true() -> None:
    for fake in ("true", 1):
        row = message("[AUTONOMOUS_FOLLOWUP: x] y", role="user", metadata={"synthetic": fake})
        assert diagnose(row).rules == (LEGACY_SYNTHETIC,)


@pytest.mark.parametrize(
    ("content", "offsets"),
    [
        ("In HTML, <!-- starts a comment", [9]),
        ("a <!-- b --> c <!-- d", [15]),
        ("a <!-- b <!-- c -->", []),
        ("`<!--` and ```<!--```", []),
        ("```\n<!-- fenced, never closed", []),
        ("<!-- open `-->` (the closer is code)", [0]),
        ("``<!--`", [2]),  # unmatched backtick runs are text
        ('<!-- METADATA: {"a": 1', []),  # a marker: the marker rules own it
    ],
)
def test_unclosed_comment_outside_code(content: str, offsets: list[int]) -> None:
    assert unclosed_comment_offsets(content) == offsets


def test_unclosed_comment_is_a_notice_and_never_fixed() -> None:
    stray = message("In HTML, <!-- starts a comment")
    diagnosis = diagnose(stray)
    assert (diagnosis.rules, diagnosis.notices) == ((), (UNCLOSED_COMMENT,))
    assert plan_repair(stray) is None


def test_code_spans_follow_fences_and_backtick_runs() -> None:
    text = "a `x` b ``y`z`` c\n```\ncode\n```\nd `e"
    spans = code_spans(text)
    assert [text[s:e] for s, e in spans] == ["`x`", "``y`z``", "```\ncode\n```\n"]
    assert len(mask_code(text)) == len(text)


def test_excerpts_show_the_changed_region() -> None:
    before = "x" * 100 + "<!-- METADATA: {} -->" + "y" * 100
    after = "x" * 100 + "y" * 100
    shown_before, shown_after = changed_excerpts(before, after)
    assert "<!-- METADATA: {} -->" in shown_before
    assert len(shown_before) < 120 and shown_before.startswith("…")
    assert "METADATA" not in shown_after


def test_report_counts_rules_and_samples_each_kind_once() -> None:
    report = RepairReport(mode="scan", max_samples=5)
    rows = [message('<!-- METADATA: {"a": 1'), message('<!-- METADATA: {"a": 1'),
            message("x <!-- c"), message("clean")]
    for row in rows:
        diagnosis = diagnose(row)
        report.record(row, diagnosis, plan_repair(row, diagnosis))
    assert report.corrupt == 2
    assert report.by_rule == {UNCLOSED_METADATA: 2}
    assert report.notices == {UNCLOSED_COMMENT: 1}
    assert len(report.samples) == 1
    json.dumps(report.to_json())


marker_texts = st.lists(
    st.sampled_from([
        "Hello ", "<!-- METADATA: ", "<!-- MSG_CONTEXT:", '{"a": ', "1}", " -->", "`", "```\n",
        "<!--", "-->", "\n", "[AUTONOMOUS_FOLLOWUP: x]", "é", '"', "}", "text",
    ]),
    max_size=14,
).map("".join)


@settings(max_examples=300, deadline=None)
@given(marker_texts, st.sampled_from(["assistant", "user"]))
def test_fixing_twice_finds_nothing(content: str, role: str) -> None:
    row = message(content, role=role)
    plan = plan_repair(row)
    if plan is None:
        return
    fixed = message(plan.new_content, role=role, metadata=plan.new_metadata,
                    synthetic=plan.synthetic, trigger_type=plan.trigger_type)
    assert not diagnose(fixed).needs_fix
    assert plan_repair(fixed) is None


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_characters="<"), max_size=200))
def test_text_without_comment_openers_is_clean(content: str) -> None:
    assert diagnose(message(content)).is_clean
