"""A provider's reasoning tokens (`completion_tokens_details.reasoning_tokens`) read from its
usage, and an impossible figure costing nothing but itself."""

from __future__ import annotations

import pytest

from app.answer.inputs import ProviderUsage
from app.upstream.wire import usage_of

BASE = {"prompt_tokens": 10, "completion_tokens": 50, "total_tokens": 60}


def test_reasoning_tokens_are_read_from_the_completion_details() -> None:
    usage = usage_of({**BASE, "completion_tokens_details": {"reasoning_tokens": 32,
                                                            "audio_tokens": 0}})
    assert usage == ProviderUsage(10, 50, 60, reasoning_tokens=32)


@pytest.mark.parametrize("details", [
    None, "32", [], {}, {"reasoning_tokens": None}, {"reasoning_tokens": "32"},
    {"reasoning_tokens": 3.5}, {"reasoning_tokens": True}, {"reasoning_tokens": -1},
    {"reasoning_tokens": 51},
])
def test_absent_or_impossible_reasoning_tokens_are_none_and_the_rest_stands(
        details: object) -> None:
    raw = dict(BASE) if details is None else {**BASE, "completion_tokens_details": details}
    assert usage_of(raw) == ProviderUsage(10, 50, 60, reasoning_tokens=None)
