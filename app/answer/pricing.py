"""Cost of a call from a price table: USD per million prompt and completion tokens, per model.

The table comes from a JSON file (setting `price_file`) or the built-in defaults below. The
file maps model names to prices: `{"gpt-4o": {"prompt": 2.5, "completion": 10.0}, ...}`
(optionally wrapped as `{"models": {...}}`). An unknown model costs `None`, never 0, and is
logged once per model so operators notice a missing price."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class ModelPrice:
    """USD per one million tokens."""

    prompt: float
    completion: float


DEFAULT_PRICES: Mapping[str, ModelPrice] = {
    "demo-1": ModelPrice(0.0, 0.0),
    "gpt-4o": ModelPrice(2.50, 10.00),
    "gpt-4o-mini": ModelPrice(0.15, 0.60),
    "gpt-4.1": ModelPrice(2.00, 8.00),
    "gpt-4.1-mini": ModelPrice(0.40, 1.60),
    "gpt-4.1-nano": ModelPrice(0.10, 0.40),
}


class PriceTable:
    """Looks up a model's price; dated variants (`gpt-4o-2024-08-06`) fall back to the
    longest listed prefix followed by `-`."""

    def __init__(
        self,
        prices: Mapping[str, ModelPrice],
        on_unknown: Callable[[str], None] | None = None,
    ) -> None:
        """`on_unknown(model)` is called the first time each unpriced model is asked for
        (the gateway logs a warning there; this module stays pure)."""
        self._prices = dict(prices)
        self._on_unknown = on_unknown
        self._warned: set[str] = set()

    def with_prices(self, extra: Mapping[str, ModelPrice]) -> PriceTable:
        """This table with `extra` over it (the models file's prices)."""
        return PriceTable({**self._prices, **extra}, self._on_unknown)

    def price_of(self, model: str) -> ModelPrice | None:
        if model in self._prices:
            return self._prices[model]
        prefixes = [name for name in self._prices if model.startswith(name + "-")]
        return self._prices[max(prefixes, key=len)] if prefixes else None

    def cost_usd(self, model: str, prompt_tokens: int, completion_tokens: int) -> float | None:
        """The cost of a call, or None (reported once per model) when the price is unknown."""
        price = self.price_of(model)
        if price is None:
            if model not in self._warned:
                self._warned.add(model)
                if self._on_unknown is not None:
                    self._on_unknown(model)
            return None
        cost = (prompt_tokens * price.prompt + completion_tokens * price.completion) / 1_000_000
        return round(cost, 8)


def _parse_price(name: str, raw: Any) -> ModelPrice:
    if not isinstance(raw, dict):
        raise ValueError(f"price of {name!r} must be an object")
    try:
        return ModelPrice(float(raw["prompt"]), float(raw["completion"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"price of {name!r} needs numeric 'prompt' and 'completion'") from exc


def parse_price_table(data: Any) -> dict[str, ModelPrice]:
    """Prices from decoded JSON: `{model: {prompt, completion}}` or `{"models": {...}}`."""
    if isinstance(data, dict) and isinstance(data.get("models"), dict):
        data = data["models"]
    if not isinstance(data, dict):
        raise ValueError("price file must hold a JSON object of models")
    return {str(name): _parse_price(str(name), raw) for name, raw in data.items()}


def load_price_table(
    path: str | None, on_unknown: Callable[[str], None] | None = None
) -> PriceTable:
    """The table from `path` (replacing the defaults), or the built-in defaults."""
    if not path:
        return PriceTable(DEFAULT_PRICES, on_unknown)
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    return PriceTable(parse_price_table(data), on_unknown)
