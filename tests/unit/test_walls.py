"""Time walls and pacing (seed: Time limits, Pacing and loop keys)."""

from __future__ import annotations

import pytest

from fractal.domain.run.walls import (
    effective_step_limit,
    iteration_deadline,
    pacing_delay,
    time_budget_label,
)


@pytest.mark.parametrize(("started", "iter_timeout", "interval", "expected"), [
    (100.0, 60, None, 160.0),
    (100.0, None, 300, 400.0),  # interval doubles as the deadline
    (100.0, 60, 300, 160.0),  # iter_timeout wins over interval
    (100.0, None, None, None),
    (0.5, 1, None, 1.5),
])
def test_iteration_deadline(started: float, iter_timeout: int | None, interval: int | None,
                            expected: float | None) -> None:
    assert iteration_deadline(started, iter_timeout, interval) == expected


@pytest.mark.parametrize(("now", "run_deadline", "iter_deadline", "step_timeout", "expected"), [
    (100.0, None, None, None, None),
    (100.0, None, None, 600, 600.0),
    (100.0, 1000.0, None, None, 900.0),
    (100.0, None, 150.0, None, 50.0),
    (100.0, 1000.0, 400.0, 600, 300.0),  # iteration wall is nearest
    (100.0, 200.0, 400.0, 600, 100.0),  # run wall is nearest
    (100.0, 1000.0, 400.0, 30, 30.0),  # step timeout is nearest
    (100.0, 100.0, None, 600, 0.0),  # deadline now: nothing left
    (100.0, 90.0, 400.0, 600, -10.0),  # already passed: record timed out, spawn nothing
    (100.0, None, 99.5, None, -0.5),
])
def test_effective_step_limit(now: float, run_deadline: float | None,
                              iter_deadline: float | None, step_timeout: int | None,
                              expected: float | None) -> None:
    assert effective_step_limit(now, run_deadline, iter_deadline, step_timeout) == expected


@pytest.mark.parametrize(("now", "started", "interval", "sleep", "run_deadline", "expected"), [
    (130.0, 100.0, 300, None, None, 270.0),  # sleep out the rest of the interval
    (500.0, 100.0, 300, None, None, 0.0),  # iteration overran the interval: no sleep
    (400.0, 100.0, 300, None, None, 0.0),
    (130.0, 100.0, None, 60, None, 60.0),  # fixed gap, whatever the iteration took
    (130.0, 100.0, None, None, None, 0.0),  # no pacing
    (130.0, 100.0, 300, None, 200.0, 70.0),  # never past the run deadline
    (130.0, 100.0, None, 60, 150.0, 20.0),
    (130.0, 100.0, None, 60, 120.0, 0.0),  # deadline already passed: never negative
    (130.0, 100.0, None, 60, 1000.0, 60.0),
    (130.0, 100.0, 300, 60, None, 270.0),  # both (invalid config): interval wins
])
def test_pacing_delay(now: float, started: float, interval: int | None, sleep: int | None,
                      run_deadline: float | None, expected: float) -> None:
    assert pacing_delay(now, started, interval, sleep, run_deadline) == expected


@pytest.mark.parametrize(("timeout", "iter_timeout", "step_timeout", "expected"), [
    (86400, 3600, 600, "1d total, 1h/iter, 10m/step"),
    (90000, 3600, 600, "25h total, 1h/iter, 10m/step"),
    (None, None, None, "no limit"),
    (None, None, 600, "10m/step"),
    (None, 5400, None, "90m/iter"),
    (7200, None, 90, "2h total, 90s/step"),
])
def test_time_budget_label(timeout: int | None, iter_timeout: int | None,
                           step_timeout: int | None, expected: str) -> None:
    assert time_budget_label(timeout, iter_timeout, step_timeout) == expected
