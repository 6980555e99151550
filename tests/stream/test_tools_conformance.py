"""Every public inline tool call case (marker spec "Inline tool calls")."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from app.stream.reasoning import split_reasoning
from tests.stream.streaming import one_char_chunks, random_chunkings, two_way_splits
from tests.stream.tools_streaming import ToolsResult, reference_answer, stream_answer

HERE = Path(__file__).parent
CASES_FILE = HERE / "conformance" / "tools.jsonl"
REPO = HERE.parent.parent
SHARED_CASES_FILE = REPO.parent / "shared" / "conformance" / "tools.jsonl"

CASES: list[dict[str, Any]] = [
    json.loads(line) for line in CASES_FILE.read_text(encoding="utf-8").splitlines() if line
]
IDS = [case["id"] for case in CASES]


def test_copy_matches_the_shared_file() -> None:
    if not SHARED_CASES_FILE.exists():
        pytest.skip(f"no shared workplace at {SHARED_CASES_FILE}; testing the copy only")
    assert CASES_FILE.read_bytes() == SHARED_CASES_FILE.read_bytes()


def test_there_are_cases() -> None:
    assert len(CASES) >= 29
    assert len(set(IDS)) == len(CASES)


def expected(case: dict[str, Any]) -> ToolsResult:
    return ToolsResult(case["text"], case["reasoning"], case["metadata"], case["warnings"],
                       [(c["name"], c["arguments"]) for c in case["tool_calls"]])


def summary(result: ToolsResult) -> tuple[object, ...]:
    return (result.text, result.reasoning, result.metadata, result.warnings,
            result.tool_calls)


def check(case: dict[str, Any], chunks: list[str]) -> None:
    assert "".join(chunks) == case["input"]
    want = expected(case)
    if case["tool_format"] == "none":
        got = split_reasoning(case["input"], tool_format="none")
        assert (got.text, got.reasoning, got.metadata, got.warnings, list(got.tool_calls)) == (
            summary(want))
        return
    streamed = stream_answer(chunks, expected=want)
    assert summary(streamed) == summary(want), f"chunks={chunks!r}"


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_case_one_chunk(case: dict[str, Any]) -> None:
    check(case, [case["input"]])
    result = split_reasoning(case["input"], tool_format=case["tool_format"])
    assert (result.text, result.reasoning, result.metadata, result.warnings,
            [tuple(c) for c in result.tool_calls]) == summary(expected(case))


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_the_reference_agrees_with_the_case(case: dict[str, Any]) -> None:
    """The test oracle itself reads the spec as the cases do."""
    if case["tool_format"] == "hermes":
        assert summary(reference_answer(case["input"])) == summary(expected(case))


@pytest.mark.parametrize("case", [c for c in CASES if "chunks" in c],
                         ids=[c["id"] for c in CASES if "chunks" in c])
def test_case_given_chunks(case: dict[str, Any]) -> None:
    check(case, case["chunks"])


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_case_one_character_at_a_time(case: dict[str, Any]) -> None:
    check(case, one_char_chunks(case["input"]))


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_case_every_two_way_split(case: dict[str, Any]) -> None:
    for chunks in two_way_splits(case["input"]):
        check(case, chunks)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_case_random_chunkings(case: dict[str, Any]) -> None:
    for chunks in random_chunkings(case["input"], seed=len(case["input"]), count=40):
        check(case, chunks)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_case_with_another_tag_name(case: dict[str, Any]) -> None:
    """The tag is configurable: the same cases with `function_call` for `tool_call` hold."""
    if case["tool_format"] != "hermes":
        return

    def renamed(s: str) -> str:
        return s.replace("tool_call>", "function_call>")

    want = expected(case)
    got = stream_answer(one_char_chunks(renamed(case["input"])), tag="function_call")
    assert (got.text, got.reasoning, got.warnings, got.tool_calls) == (
        renamed(want.text), renamed(want.reasoning), want.warnings,
        [(name, renamed(arguments)) for name, arguments in want.tool_calls])


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_case_without_tools_offered(case: dict[str, Any]) -> None:
    """A request that offered no tools gets the same text and `tool_call_unrequested` once
    when the answer held a call."""
    if case["tool_format"] != "hermes":
        return
    want = expected(case)
    got = stream_answer(one_char_chunks(case["input"]), offered=False)
    assert got.text == want.text and got.tool_calls == want.tool_calls
    assert got.warnings.count("tool_call_unrequested") == (1 if want.tool_calls else 0)
    assert [w for w in got.warnings if w != "tool_call_unrequested"] == want.warnings
