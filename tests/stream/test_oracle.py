"""The reference the property tests trust must itself pass every public conformance case."""

from __future__ import annotations

from typing import Any

import pytest

from tests.stream.oracle import reference
from tests.stream.test_conformance import CASES, expected


@pytest.mark.parametrize("case", CASES, ids=[case["id"] for case in CASES])
def test_oracle_reproduces_the_case(case: dict[str, Any]) -> None:
    got = reference(case["input"])
    assert (got.text, got.metadata, got.warnings) == expected(case)
