"""The ``usage_pause_at`` setting's value: the share of a usage window at which a node
waits early. Its own module so that reading a config does not define the usage-window
rules (``fractal.domain.usage.windows`` re-exports it). Pure.
"""

from __future__ import annotations

__all__ = ["parse_pause_at"]


def parse_pause_at(value: object) -> float | None:
    """``usage_pause_at`` as a fraction: ``"95%"`` or ``0.95`` -> 0.95; None (off) stays
    None. Raises ValueError for anything outside (0, 100 %]."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError("must be a percentage such as \"95%\", a fraction, or null")
    if isinstance(value, str):
        text = value.strip()
        if not text.endswith("%"):
            raise ValueError("must be a percentage such as \"95%\", a fraction, or null")
        try:
            fraction = float(text[:-1]) / 100
        except ValueError:
            raise ValueError("must be a percentage such as \"95%\", a fraction, or null") \
                from None
    elif isinstance(value, int | float):
        fraction = float(value)
    else:
        raise ValueError("must be a percentage such as \"95%\", a fraction, or null")
    if not 0 < fraction <= 1:
        raise ValueError("must be above 0% and at most 100%")
    return fraction
