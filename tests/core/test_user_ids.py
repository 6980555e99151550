"""The one rule for user ids, shared by the API and scripts/keys.py."""

from __future__ import annotations

import pytest

from app.core.user_ids import MAX_USER_ID_CHARS, user_id_problem


@pytest.mark.parametrize("value", ["alice", "ops@example.org", "Žofie", "x" * MAX_USER_ID_CHARS])
def test_ordinary_ids_pass(value: str) -> None:
    assert user_id_problem(value) is None


@pytest.mark.parametrize(("value", "problem"), [
    ("", "blank"), (" \t", "blank"), ("x" * (MAX_USER_ID_CHARS + 1), "at most 255"),
    ("a\tb", "control"), ("nul\x00", "control"), ("\ud800", "control"),
])
def test_what_no_request_could_name_is_refused(value: str, problem: str) -> None:
    found = user_id_problem(value)
    assert found is not None and problem in found
