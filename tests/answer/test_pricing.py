"""Prices: per million tokens, unknown model is None (not 0) and warned once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.answer.pricing import DEFAULT_PRICES, ModelPrice, PriceTable, load_price_table


def test_cost_per_million_tokens() -> None:
    table = PriceTable({"m": ModelPrice(prompt=2.0, completion=10.0)})
    assert table.cost_usd("m", 1_000_000, 0) == pytest.approx(2.0)
    assert table.cost_usd("m", 1000, 500) == pytest.approx(0.002 + 0.005)


def test_dated_variant_uses_the_longest_listed_prefix() -> None:
    table = PriceTable({"gpt-4o": ModelPrice(1, 1), "gpt-4o-mini": ModelPrice(2, 2)})
    assert table.price_of("gpt-4o-mini-2024-07-18") == ModelPrice(2, 2)
    assert table.price_of("gpt-4o-2024-08-06") == ModelPrice(1, 1)
    assert table.price_of("gpt-4oo") is None


def test_unknown_model_costs_none_and_is_reported_once() -> None:
    warned: list[str] = []
    table = PriceTable(DEFAULT_PRICES, on_unknown=warned.append)
    assert table.cost_usd("mystery-model", 10, 10) is None
    assert table.cost_usd("mystery-model", 10, 10) is None
    assert table.cost_usd("other-model", 1, 1) is None
    assert warned == ["mystery-model", "other-model"]


def test_known_free_model_costs_zero_not_none() -> None:
    assert PriceTable(DEFAULT_PRICES).cost_usd("demo-1", 100, 100) == 0.0


def test_price_file_replaces_the_defaults(tmp_path: Path) -> None:
    path = tmp_path / "prices.json"
    path.write_text(json.dumps({"models": {"house": {"prompt": 1, "completion": 3}}}))
    table = load_price_table(str(path))
    assert table.cost_usd("house", 1_000_000, 1_000_000) == pytest.approx(4.0)
    assert table.cost_usd("gpt-4o", 1, 1) is None


def test_defaults_without_a_file() -> None:
    assert load_price_table(None).price_of("gpt-4o") == DEFAULT_PRICES["gpt-4o"]


@pytest.mark.parametrize("content", ['[1, 2]', '{"m": {"prompt": 1}}', '{"m": 3}'])
def test_malformed_price_file_is_refused(tmp_path: Path, content: str) -> None:
    path = tmp_path / "prices.json"
    path.write_text(content)
    with pytest.raises(ValueError):
        load_price_table(str(path))
