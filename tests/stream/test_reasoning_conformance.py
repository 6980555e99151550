"""Every public reasoning case, under every chunking the issue asks for, on both channels."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from app.stream.reasoning import split_reasoning
from tests.stream.reasoning_streaming import Expected, reference_split, stream_split
from tests.stream.streaming import one_char_chunks, random_chunkings, two_way_splits

HERE = Path(__file__).parent
CASES_FILE = HERE / "conformance" / "reasoning.jsonl"
REPO = HERE.parent.parent
SHARED_CASES_FILE = REPO.parent / "shared" / "conformance" / "reasoning.jsonl"

CASES: list[dict[str, Any]] = [
    json.loads(line) for line in CASES_FILE.read_text(encoding="utf-8").splitlines() if line
]
IDS = [case["id"] for case in CASES]


def expected(case: dict[str, Any]) -> Expected:
    return Expected(case["text"], case["reasoning"], case["metadata"], case["warnings"])


def check(case: dict[str, Any], chunks: list[str], field_chunks: list[str] | None = None) -> None:
    field = case.get("reasoning_input", "")
    field_chunks = [field] if field_chunks is None and field else field_chunks or []
    assert "".join(chunks) == case["input"] and "".join(field_chunks) == field
    want = expected(case)
    got = stream_split(chunks, field_chunks, reasoning_format=case.get("reasoning_format",
                                                                       "think"), expected=want)
    assert Expected(got.text, got.reasoning, got.metadata, got.warnings) == want, (
        f"chunks={chunks!r} field_chunks={field_chunks!r}")


def test_copy_matches_the_shared_file() -> None:
    if not SHARED_CASES_FILE.exists():
        pytest.skip(f"no shared workplace at {SHARED_CASES_FILE}; testing the copy only")
    assert CASES_FILE.read_bytes() == SHARED_CASES_FILE.read_bytes()


def test_there_are_cases() -> None:
    assert len(CASES) >= 28
    assert len(set(IDS)) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_case_one_chunk(case: dict[str, Any]) -> None:
    check(case, [case["input"]])
    result = split_reasoning(case["input"], case.get("reasoning_input", ""),
                             reasoning_format=case.get("reasoning_format", "think"))
    assert Expected(result.text, result.reasoning, result.metadata, result.warnings) == (
        expected(case))


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_the_reference_agrees_with_the_case(case: dict[str, Any]) -> None:
    """The test oracle itself reads the spec as the cases do."""
    assert reference_split(case["input"], case.get("reasoning_input", ""),
                           case.get("reasoning_format", "think")) == expected(case)


@pytest.mark.parametrize("case", [c for c in CASES if "chunks" in c],
                         ids=[c["id"] for c in CASES if "chunks" in c])
def test_case_given_chunks(case: dict[str, Any]) -> None:
    check(case, case["chunks"])


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_case_one_character_at_a_time(case: dict[str, Any]) -> None:
    check(case, one_char_chunks(case["input"]), one_char_chunks(case.get("reasoning_input", "")))


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_case_every_two_way_split(case: dict[str, Any]) -> None:
    for chunks in two_way_splits(case["input"]):
        check(case, chunks)
    for field_chunks in two_way_splits(case.get("reasoning_input", "")):
        check(case, [case["input"]], field_chunks)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_case_random_chunkings(case: dict[str, Any]) -> None:
    field = case.get("reasoning_input", "")
    fields = list(random_chunkings(field, seed=7, count=40))
    for n, chunks in enumerate(random_chunkings(case["input"], seed=len(case["input"]),
                                                count=40)):
        check(case, chunks, fields[n])


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_case_with_another_tag_name(case: dict[str, Any]) -> None:
    """The tag is configurable: the same cases with `reasoning` for `think` hold too."""
    def renamed(s: str) -> str:
        return s.replace("<think>", "<reasoning>").replace("</think>", "</reasoning>")

    fmt = case.get("reasoning_format", "think")
    got = stream_split(one_char_chunks(renamed(case["input"])),
                       one_char_chunks(case.get("reasoning_input", "")),
                       reasoning_format=fmt, tag="reasoning")
    want = expected(case)
    assert (got.text, got.reasoning, got.metadata, got.warnings) == (
        renamed(want.text), renamed(want.reasoning), want.metadata, want.warnings)
