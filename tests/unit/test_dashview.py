"""The dashboard's detail line and gauge (fractal/domain/dashview.py)."""

from __future__ import annotations

import pytest

from fractal.domain.dashview import Gauge, Level, Live, clock_label, gauge, live_detail

NOW = 10_000.0


@pytest.mark.parametrize(("seconds", "text"), [
    (-3, "0s"), (42, "42s"), (252, "4m12s"), (7500, "2h05m"), (273600, "3d04h")])
def test_clock_label(seconds: float, text: str) -> None:
    assert clock_label(seconds) == text


@pytest.mark.parametrize(("status", "live", "reason", "text"), [
    ("active", Live(3, 2, 10, 3, 5, "EXECUTE", NOW - 252), "",
     "run 3 · iter 2/10 · step 3/5 EXECUTE 4m12s"),
    ("active", Live(3, 2, None, 1, None, "PLAN", NOW - 5), "", "run 3 · iter 2/∞ · step 1 PLAN 5s"),
    ("active", Live(3, 1, 4, 2, 3, "REVIEW", NOW, gate=True), "",
     "run 3 · iter 1/4 · awaiting approval"),
    ("active", Live(3, 1, 4, signal="pausing"), "", "run 3 · iter 1/4 · pausing"),
    ("active", Live(), "", "booting"),
    ("active", Live(3, 2, 10, 1, 5, "WORK", NOW - 9, usage_wait=True,
                    usage_until=1_767_276_300.0), "",
     "run 3 · iter 2/10 · waiting for usage window until 14:05Z"),
    ("active", Live(3, usage_wait=True), "", "run 3 · waiting for usage window until an unknown instant"),
    ("active", Live(3, gone=True), "", "supervisor gone (any read heals it: the run parks, interrupted)"),
    ("paused", Live(3, gate=True), "", "parked · awaiting approval"),
    ("exited", Live(), "Exited at iteration 3.2", "Exited at iteration 3.2"),
])
def test_live_detail(status: str, live: Live, reason: str, text: str) -> None:
    assert live_detail(status, live, NOW, reason) == text


@pytest.mark.parametrize(("spent", "cap", "reserve", "expected"), [
    (1.0, None, None, None),
    (None, 10.0, None, Gauge(0.0, Level.OK)),
    (8.9, 10.0, None, Gauge(0.89, Level.OK)),
    (9.0, 10.0, None, Gauge(0.9, Level.RESERVE)),
    (7.0, 10.0, 3.0, Gauge(0.7, Level.RESERVE)),
    (10.0, 10.0, None, Gauge(1.0, Level.CAP)),
    (12.0, 10.0, None, Gauge(1.0, Level.CAP)),
])
def test_gauge(spent: float | None, cap: float | None, reserve: float | None,
               expected: Gauge | None) -> None:
    got = gauge(spent, cap, reserve)
    if expected is None:
        assert got is None
    else:
        assert got is not None and got.level is expected.level
        assert got.share == pytest.approx(expected.share)
