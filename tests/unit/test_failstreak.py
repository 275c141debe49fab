"""The failed-iterations stop, as a table of iteration outcomes."""

from __future__ import annotations

import pytest

from fractal.domain.run.failstreak import FailStreak, advance_failures, failures_reason


@pytest.mark.parametrize(("outcomes", "limit", "stop_at", "reason"), [
    ([True, True, True], 3, 3, "3 consecutive iterations failed (last: c)"),
    ([True, True, False, True, True], 3, None, None),
    ([True, True, False, True, True, True], 3, 6, "3 consecutive iterations failed (last: f)"),
    ([True], 1, 1, "1 consecutive iterations failed (last: a)"),
    ([True] * 10, None, None, None),
    ([False] * 5, 3, None, None),
])
def test_failed_iterations(outcomes: list[bool], limit: int | None, stop_at: int | None,
                           reason: str | None) -> None:
    streak = FailStreak()
    for index, failed in enumerate(outcomes, start=1):
        streak = advance_failures(streak, failed, "abcdefghij"[index - 1])
        why = failures_reason(streak, limit)
        if why is not None:
            assert (index, why) == (stop_at, reason)
            return
    assert (stop_at, reason) == (None, None)


def test_a_failure_without_reason_keeps_the_last_one() -> None:
    streak = advance_failures(advance_failures(FailStreak(), True, "boom"), True)
    assert failures_reason(streak, 2) == "2 consecutive iterations failed (last: boom)"
    assert failures_reason(FailStreak(2), 2) == "2 consecutive iterations failed"
