"""Turn events survive the trip through a shared log (Redis) unchanged."""

from __future__ import annotations

import uuid

import pytest

from app.answer.event_codec import BadEvent, event_from_json, event_to_json, is_last
from app.answer.events import (
    Delta,
    Ended,
    Failed,
    Metadata,
    Reasoning,
    Started,
    TurnEvent,
    Usage,
)

IDS = [uuid.uuid4() for _ in range(3)]
EVENTS: list[TurnEvent] = [
    Started(IDS[0], IDS[1], IDS[2]),
    Delta("Ahoj <b>světe</b> \u2028 😀", 7),
    Reasoning("Přemýšlím… <think>", 6),
    Metadata({"language": "cs", "sources": ["https://example.com"], "awaiting": None}),
    Usage(185, 108, 293, None, "estimated"),
    Usage(1, 2, 3, 0.000123, "provider", reasoning_tokens=2),
    Ended(IDS[2], "interrupted"),
    Ended(IDS[2], "interrupted", "shutting_down"),
    Failed("upstream_timeout", "the model server did not answer"),
]


@pytest.mark.parametrize("event", EVENTS, ids=lambda e: type(e).__name__)
def test_every_event_comes_back_equal(event: TurnEvent) -> None:
    assert event_from_json(event_to_json(event)) == event


def test_only_the_closing_events_end_a_stream() -> None:
    assert [is_last(e) for e in EVENTS] == [False] * 6 + [True, True, True]


def test_a_usage_logged_before_reasoning_tokens_reads_as_none_reported() -> None:
    old = {"k": "usage", "prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3,
           "cost_usd": None, "usage_source": "provider"}
    assert event_from_json(old) == Usage(1, 2, 3, None, "provider", None)


@pytest.mark.parametrize("data", [{"k": "nonsense"}, {"k": "delta", "text": "x"}, {}])
def test_an_unknown_or_broken_entry_is_refused(data: dict[str, object]) -> None:
    with pytest.raises(BadEvent):
        event_from_json(data)
