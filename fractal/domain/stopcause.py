"""Which run-ending condition names the end when several hold at one boundary.

See docs/checks.md ("When several endings hold at once").

The precedence, highest first:

1. ``EXIT_CHECK`` — the exit check passed: the goal is met, so the run is ``completed``
   even if a stop arrived, the budget ran out or the wall was reached in the same breath;
2. ``SIGNAL`` — a stop or finish request, or the node's own ``done`` (the operator's
   word, or the node's, beats the loop's own judgement);
3. ``NO_PROGRESS`` — the exit check failed the same way ``no_progress`` times in a row;
4. ``STAGNATION`` — the exit check's score rose by less than ``min_gain``
   ``stagnation`` times in a row;
5. ``BUDGET`` — a cost ceiling landed;
6. ``TIME`` — the run wall was reached;
7. ``MAX_ITERS`` — the iteration cap was reached.

Completion outranks the operator, who outranks the loop's stall detectors, which
outrank the resource limits: a run that finished its work is never reported as
stopped or out of budget, and a stalled run is named as stalled rather than as having
merely run out of something. Of the two stall detectors, an identical failure is the
plainer fact, so ``no progress`` names the end when both hold.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum

__all__ = ["STOP_PRECEDENCE", "StopCause", "first_cause"]


class StopCause(StrEnum):
    """A condition that can end a run at an iteration boundary, in precedence order."""

    EXIT_CHECK = "exit check passed"
    SIGNAL = "stop or finish signal"  # the node's own done counts as one
    NO_PROGRESS = "no progress"
    STAGNATION = "stagnation"
    BUDGET = "budget"
    TIME = "time"
    MAX_ITERS = "max iterations"


STOP_PRECEDENCE: tuple[StopCause, ...] = tuple(StopCause)
"""The causes, highest first (the declaration order of ``StopCause``)."""


def first_cause(holding: Iterable[StopCause]) -> StopCause | None:
    """The highest-ranked cause among ``holding``, or None when it is empty."""
    present = set(holding)
    return next((cause for cause in STOP_PRECEDENCE if cause in present), None)
