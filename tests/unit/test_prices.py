"""Reading the LiteLLM price table and pricing token usage (seed: "Pricing and untracked
spend"; ref §5.3-5.4)."""

from __future__ import annotations

import json

import pytest

from fractal.domain.budget.prices import Rates, candidates, lookup, parse_table, price_usage
from tests.conftest import PRICES_FIXTURE


def test_the_fixture_parses_to_its_priced_models() -> None:
    table = parse_table(json.loads(PRICES_FIXTURE.read_text()))
    assert table["gpt-fixture"] == Rates(1e-6, 1e-5, 1e-7)
    assert table["gpt-fixture-pricey"] == Rates(1e-4, 1e-3, None)
    assert "embedding-fixture" not in table  # no rates: unpriced
    assert table["sample_spec"] == Rates(0.0, 0.0, None)


@pytest.mark.parametrize(("entry", "priced"), [
    ({"input_cost_per_token": 1e-6, "output_cost_per_token": 2e-6}, True),
    ({"input_cost_per_token": 1e-6}, False),
    ({"output_cost_per_token": 1e-6}, False),
    ({"input_cost_per_token": "1e-6", "output_cost_per_token": 2e-6}, False),
    ({"input_cost_per_token": True, "output_cost_per_token": 2e-6}, False),
    ({"input_cost_per_token": -1.0, "output_cost_per_token": 2e-6}, False),
    ("not an object", False),
])
def test_entries_without_both_rates_are_unpriced(entry: object, priced: bool) -> None:
    assert ("m" in parse_table({"m": entry})) is priced


@pytest.mark.parametrize(("model", "provider", "names"), [
    ("gpt-5", None, ["gpt-5"]),
    ("gpt-5", "openrouter", ["gpt-5", "openrouter/gpt-5"]),
    ("anthropic/claude-x", "openrouter",
     ["anthropic/claude-x", "openrouter/anthropic/claude-x", "claude-x"]),
    ("openai/gpt-5", None, ["openai/gpt-5", "gpt-5"]),
])
def test_lookup_candidates(model: str, provider: str | None, names: list[str]) -> None:
    assert candidates(model, provider) == names


@pytest.mark.parametrize(("model", "provider", "found"), [
    ("gpt-fixture", None, "gpt-fixture"),
    ("openai/gpt-fixture", None, "gpt-fixture"),
    ("anthropic/claude-fixture", "openrouter", "openrouter/anthropic/claude-fixture"),
    ("anthropic/claude-fixture", None, None),
    ("gpt-5.5", None, None),
])
def test_lookup(model: str, provider: str | None, found: str | None) -> None:
    table = parse_table(json.loads(PRICES_FIXTURE.read_text()))
    assert lookup(table, model, provider) == (table[found] if found else None)


@pytest.mark.parametrize(("rates", "usage", "usd"), [
    (Rates(1e-6, 1e-5, 1e-7), (2000, 0, 200), 0.004),
    (Rates(1e-6, 1e-5, 1e-7), (2000, 1000, 200), 0.001 + 0.0001 + 0.002),
    (Rates(1e-6, 1e-5, None), (2000, 1000, 200), 0.004),  # no cache rate: input rate
    (Rates(1e-6, 1e-5, 1e-7), (100, 500, 0), 100 * 1e-7),  # cached is a subset of input
    (Rates(1e-6, 1e-5, 1e-7), (0, 0, 0), 0.0),
])
def test_price_usage(rates: Rates, usage: tuple[int, int, int], usd: float) -> None:
    assert price_usage(rates, *usage) == pytest.approx(usd)
