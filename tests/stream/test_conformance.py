"""Every public conformance case, under every chunking the issue asks for."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from app.stream import strip_markers
from tests.stream.streaming import (
    one_char_chunks,
    random_chunkings,
    stream,
    two_way_splits,
)

HERE = Path(__file__).parent
CASES_FILE = HERE / "conformance" / "markers.jsonl"
REPO = HERE.parent.parent
SHARED_CASES_FILE = REPO.parent / "shared" / "conformance" / "markers.jsonl"

CASES: list[dict[str, Any]] = [
    json.loads(line) for line in CASES_FILE.read_text(encoding="utf-8").splitlines() if line
]


def expected(case: dict[str, Any]) -> tuple[str, Any, list[str]]:
    return case["text"], case["metadata"], case["warnings"]


def check(case: dict[str, Any], chunks: list[str]) -> None:
    assert "".join(chunks) == case["input"]
    got = stream(chunks, expected_text=case["text"])
    assert (got.text, got.metadata, got.warnings) == expected(case), f"chunks={chunks!r}"


def test_copy_matches_the_shared_file() -> None:
    if not SHARED_CASES_FILE.exists():
        pytest.skip(f"no shared workplace at {SHARED_CASES_FILE}; testing the copy only")
    assert CASES_FILE.read_bytes() == SHARED_CASES_FILE.read_bytes()


def test_there_are_cases() -> None:
    assert len(CASES) >= 50
    assert len({case["id"] for case in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[case["id"] for case in CASES])
def test_case_one_chunk(case: dict[str, Any]) -> None:
    check(case, [case["input"]])
    result = strip_markers(case["input"])
    assert (result.text, result.metadata, result.warnings) == expected(case)


@pytest.mark.parametrize(
    "case", [c for c in CASES if "chunks" in c], ids=[c["id"] for c in CASES if "chunks" in c]
)
def test_case_given_chunks(case: dict[str, Any]) -> None:
    check(case, case["chunks"])


@pytest.mark.parametrize("case", CASES, ids=[case["id"] for case in CASES])
def test_case_one_character_at_a_time(case: dict[str, Any]) -> None:
    check(case, one_char_chunks(case["input"]))


@pytest.mark.parametrize(
    "case",
    [c for c in CASES if len(c["input"]) <= 300],
    ids=[c["id"] for c in CASES if len(c["input"]) <= 300],
)
def test_case_every_two_way_split(case: dict[str, Any]) -> None:
    for chunks in two_way_splits(case["input"]):
        check(case, chunks)


@pytest.mark.parametrize("case", CASES, ids=[case["id"] for case in CASES])
def test_case_random_chunkings(case: dict[str, Any]) -> None:
    count = 40 if len(case["input"]) <= 2_000 else 4
    for chunks in random_chunkings(case["input"], seed=len(case["input"]), count=count):
        check(case, chunks)
