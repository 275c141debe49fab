"""Token prices: reading the LiteLLM price table, finding a model in it, pricing usage.

How token-priced agents are charged is in docs/budgets.md ("Pricing token-priced agents"). The table is LiteLLM's public
``model_prices_and_context_window.json``: an object mapping model names to entries with
``input_cost_per_token``, ``output_cost_per_token`` and, optionally,
``cache_read_input_token_cost`` (USD per token). Pure: parsed JSON in, numbers out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["Rates", "candidates", "lookup", "parse_table", "price_usage"]


@dataclass(frozen=True)
class Rates:
    """USD per token: fresh input, output, and cache-read input (None: the input rate)."""

    input: float
    output: float
    cache_read: float | None = None


def _rate(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) and value >= 0 else None


def parse_table(data: Mapping[str, object]) -> dict[str, Rates]:
    """The priced models of a parsed price table.

    An entry without both an input and an output rate is unpriced and left out,
    as are non-object entries (LiteLLM's ``sample_spec`` documents the format).
    """
    table: dict[str, Rates] = {}
    for name, entry in data.items():
        if not isinstance(entry, Mapping):
            continue
        fresh, out = _rate(entry.get("input_cost_per_token")), _rate(
            entry.get("output_cost_per_token"))
        if fresh is None or out is None:
            continue
        table[name] = Rates(fresh, out, _rate(entry.get("cache_read_input_token_cost")))
    return table


def candidates(model: str, provider: str | None) -> list[str]:
    """Names to try for ``model``, in order: exact, ``<provider>/<model>`` on a route, then
    without its author prefix (``anthropic/claude-x`` -> ``claude-x``); no duplicates."""
    names = [model]
    if provider:
        names.append(f"{provider}/{model}")
    if "/" in model:
        names.append(model.split("/", 1)[1])
    return list(dict.fromkeys(names))


def lookup(table: Mapping[str, Rates], model: str, provider: str | None) -> Rates | None:
    """The rates of ``model`` (see ``candidates``), or None when the table has no price."""
    for name in candidates(model, provider):
        rates = table.get(name)
        if rates is not None:
            return rates
    return None


def price_usage(rates: Rates, input_tokens: int, cached_input_tokens: int,
                output_tokens: int) -> float:
    """USD for one launch's usage. ``input_tokens`` includes the cached subset, which is
    priced at the cache-read rate (the input rate when the table has none)."""
    cached = max(0, min(cached_input_tokens, input_tokens))
    fresh = max(0, input_tokens - cached)
    cache_rate = rates.input if rates.cache_read is None else rates.cache_read
    return fresh * rates.input + cached * cache_rate + max(0, output_tokens) * rates.output
