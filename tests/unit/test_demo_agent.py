"""The demo agent's pause per step, and the environment variable that overrides it."""

from __future__ import annotations

import pytest

from fractal.demo.agent import THINK_ENV, think_seconds


@pytest.mark.parametrize(("value", "name", "seconds"), [
    (None, "PLAN", 0.3),
    (None, "SYNC", 0.1),
    ("0", "PLAN", 0.0),
    ("0", "SYNC", 0.0),
    ("1.5", "COMMIT", 1.5),
    ("soon", "PLAN", 0.3),  # not a number: the default
    ("-1", "SYNC", 0.1),  # out of range: the default
    ("11", "PLAN", 0.3),
])
def test_think_seconds(monkeypatch: pytest.MonkeyPatch, value: str | None, name: str,
                       seconds: float) -> None:
    if value is None:
        monkeypatch.delenv(THINK_ENV, raising=False)
    else:
        monkeypatch.setenv(THINK_ENV, value)
    assert think_seconds(name) == seconds
