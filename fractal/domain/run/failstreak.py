"""The failed-iterations stop: a node whose agent fails every time stops spinning.

An iteration *failed* when it recorded a failed outcome (a step failed past its
retries, a setup failure, a check that stopped the iteration). ``max_failed_iters``
such iterations in a row end the run ``exited`` / 1 with
``3 consecutive iterations failed (last: <reason>)``. An iteration that did not fail
restarts the count. A usage-limit wait, a pause or an interruption is not an iteration
outcome at all, so it neither counts nor restarts the count. ``None`` turns the stop
off. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DEFAULT_MAX_FAILED_ITERS", "FAILED_ITERS", "FailStreak", "advance_failures",
           "failures_reason"]

DEFAULT_MAX_FAILED_ITERS = 3

FAILED_ITERS = "consecutive iterations failed"
"""The words after the count in the run's reason (``3 consecutive iterations failed``)."""


@dataclass(frozen=True)
class FailStreak:
    """Consecutive failed iterations so far and the last one's reason."""

    count: int = 0
    last_reason: str = ""


def advance_failures(streak: FailStreak, failed: bool, reason: str = "") -> FailStreak:
    """The streak after one more iteration: +1 when it ``failed`` (keeping ``reason``),
    else back to 0."""
    if not failed:
        return FailStreak()
    return FailStreak(streak.count + 1, reason or streak.last_reason)


def failures_reason(streak: FailStreak, limit: int | None) -> str | None:
    """The run's reason once ``limit`` failed iterations in a row are reached, else None."""
    if limit is None or streak.count < limit:
        return None
    last = f" (last: {streak.last_reason})" if streak.last_reason else ""
    return f"{streak.count} {FAILED_ITERS}{last}"
