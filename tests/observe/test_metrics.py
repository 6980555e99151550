"""app.observe.metrics without servers: the overhead definition and the registries.
The metrics of real turns, scraped over HTTP, are in tests/api/test_metrics.py."""

from __future__ import annotations

import datetime as dt

from app.observe.metrics import GatewayMetrics, gateway_overhead_s

NOW = dt.datetime(2026, 11, 22, 12, 0, 0, tzinfo=dt.UTC)


def at(seconds_before_now: float) -> dt.datetime:
    return NOW - dt.timedelta(seconds=seconds_before_now)


def test_overhead_is_wall_time_minus_the_union_of_upstream_calls() -> None:
    # a 10 s turn: a title call 9.5..8.5 s before the end, the main call 8..1 s before
    calls = [(at(9.5), at(8.5)), (at(8.0), at(1.0))]
    assert gateway_overhead_s(100.0, 110.0, NOW, calls) == 2.0


def test_overlapping_and_outlying_calls_are_counted_once_and_clipped() -> None:
    calls = [(at(8.0), at(4.0)), (at(6.0), at(2.0)), (at(30.0), at(9.0))]
    # union within the 10 s turn: 10..9 and 8..2 -> 7 s of upstream
    assert round(gateway_overhead_s(0.0, 10.0, NOW, calls), 9) == 3.0
    assert gateway_overhead_s(0.0, 10.0, NOW, []) == 10.0


def sample(metrics: GatewayMetrics, name: str, **labels: str) -> float:
    value = metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


def test_two_apps_in_one_process_have_separate_registries() -> None:
    first, second = GatewayMetrics(), GatewayMetrics()
    first.turns.labels(status="complete").inc()
    assert sample(first, "chatgate_turns_total", status="complete") == 1
    assert sample(second, "chatgate_turns_total", status="complete") == 0
    assert b"chatgate_turns_total" in first.exposition()
