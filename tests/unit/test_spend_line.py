"""The dashboard card's spend line: four decimal places like ``fractal node cost``, ``no
cap`` for an uncapped run, ``?`` only for an unknown spend."""

from __future__ import annotations

import pytest

from fractal.tui.render import spend_line


@pytest.mark.parametrize(("spent", "cap", "expected"), [
    (0.004, None, "run spend $0.0040 of no cap"),
    (0.004, 2.0, "run spend $0.0040 of $2.0000"),
    (None, 2.0, "run spend ? of $2.0000"),
    (None, None, "run spend ? of no cap"),
    (0.0, 0.5, "run spend $0.0000 of $0.5000"),
])
def test_the_spend_line_keeps_the_cost_readouts_precision(
        spent: float | None, cap: float | None, expected: str) -> None:
    assert spend_line(spent, cap) == expected
