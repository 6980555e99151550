"""Every public inline tool call case (marker spec "Inline tool calls")."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

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
