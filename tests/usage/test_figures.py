"""Usage figures and the rule that counts a turn: the one rule the live rollup, the backfill
and the verification share (pure)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

from app.answer.records import CallRecord
from app.usage.figures import (
    UsageFigures,
    deltas_by_model,
    exact_cost,
    message_carriers,
)

START = dt.datetime(2026, 11, 20, 9, tzinfo=dt.UTC)


def call(model: str, prompt: int = 10, completion: int = 2, *, stage: str = "main",
         cost: float | None = 0.001, after_s: int = 0, reasoning: int | None = None
         ) -> CallRecord:
    started = START + dt.timedelta(seconds=after_s)
    return CallRecord(stage=stage, model=model, prompt_tokens=prompt,
                      completion_tokens=completion, cost_usd=cost, usage_source="provider",
                      started_at=started, finished_at=started, first_token_at=None,
                      status="complete", reasoning_tokens=reasoning)


def test_every_main_call_carries_a_message() -> None:
    title, main = call("mini", stage="title"), call("big", after_s=1)
    assert message_carriers([title, main]) == [main]


def test_a_turn_that_ended_before_its_main_call_is_carried_by_its_earliest_call() -> None:
    summary, title = call("b", stage="summary", after_s=2), call("a", stage="title")
    assert message_carriers([summary, title]) == [title]
    assert message_carriers([]) == []


def test_deltas_by_model_count_tokens_calls_cost_and_the_message() -> None:
    deltas = deltas_by_model([
        call("mini", 20, 5, stage="title", cost=0.000006),
        call("big", 1000, 200, cost=0.0045),
        call("big", 50, 5, stage="summary", cost=None),
    ])
    assert deltas == {
        "mini": UsageFigures(25, 20, 5, 0, 1, Decimal("0.000006"), 0),
        "big": UsageFigures(1255, 1050, 205, 1, 2, Decimal("0.0045"), 1),
    }


def test_unknown_cost_stays_none_and_known_costs_add_exactly() -> None:
    figures = UsageFigures()
    figures.add(UsageFigures(total_tokens=1, unpriced_call_count=1))
    assert figures.cost_usd is None and figures.unpriced_call_count == 1
    for _ in range(10):
        figures.add_call(call("m", cost=0.1))
    assert figures.cost_usd == Decimal("1")  # ten float 0.1s, exactly
    assert figures.as_dict() == {
        "total_tokens": 121, "prompt_tokens": 100, "completion_tokens": 20,
        "message_count": 0, "llm_call_count": 10, "cost_usd": 1.0, "unpriced_call_count": 1,
        "reasoning_tokens": 0,
    }


def test_reasoning_tokens_add_up_and_a_call_that_reported_none_adds_zero() -> None:
    deltas = deltas_by_model([call("r", 10, 50, reasoning=40), call("r", 10, 5),
                              call("r", 1, 9, stage="title", reasoning=7)])
    assert (deltas["r"].completion_tokens, deltas["r"].reasoning_tokens) == (64, 47)
    total = UsageFigures()
    total.add(deltas["r"])
    total.add(deltas["r"])
    assert total.as_dict()["reasoning_tokens"] == 94


def test_exact_cost_is_at_the_rollup_scale() -> None:
    assert exact_cost(None) is None
    assert exact_cost(0.1) == Decimal("0.100000000")
    assert exact_cost(1.23456789012) == Decimal("1.234567890")
