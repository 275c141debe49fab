"""The ``--reserve-budget`` option of ``node init`` and ``node update``: a USD amount or a
share of ``max_cost``, resolved to the USD amount ``config.json`` stores. Pure; its own
module so the config schema stays one concept (``domain.config`` re-exports it).
"""

from __future__ import annotations

import math

from fractal.domain.errors import InvalidValue

__all__ = ["resolve_reserve"]


def _number(text: str) -> float | None:
    """``text`` as a finite float, else None."""
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def resolve_reserve(text: str, max_cost: float | None) -> float:
    """``--reserve-budget`` as USD, 4 dp: ``"N%"`` of ``max_cost`` or an amount. InvalidValue
    unless a finite number >= 0 (a % needs max_cost); the 99% rule is ``validate_config``'s."""
    stripped = text.strip()
    percent = stripped.endswith("%")
    number = _number(stripped[:-1].strip() if percent else stripped)
    if number is None or number < 0:
        raise InvalidValue(f'reserve_budget: "{text}" must be a USD amount >= 0 or a '
                           "percentage of max_cost such as 10%")
    if not percent:
        return round(number, 4)
    if max_cost is None:
        raise InvalidValue(f'reserve_budget: "{text}" is a percentage but max_cost is not set; '
                           "set max_cost or give a USD amount")
    return round(max_cost * number / 100, 4)
