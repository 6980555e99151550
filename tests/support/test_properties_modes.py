"""The property tests' two modes: the suite's fixed draw, and CI's randomized rounds."""

from __future__ import annotations

import pytest

from tests.support import properties


def test_the_suites_properties_draw_the_same_inputs_every_run(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(properties, "RANDOMIZED", False)
    fixed = properties.property_settings(max_examples=3000)
    assert (fixed.derandomize, fixed.max_examples, fixed.database, fixed.deadline) == (
        True, 1000, None, None)


def test_the_randomized_rounds_draw_new_inputs_and_print_how_to_replay_a_failure(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(properties, "RANDOMIZED", True)
    randomized = properties.property_settings(max_examples=3000)
    assert (randomized.derandomize, randomized.print_blob, randomized.max_examples) == (
        False, True, 3000)
