"""How the loop unwinds when a pause acts: ``Park``. What the operator asked of the run
is read by ``fractal.control.Steering`` (re-exported here), beside the verbs' writes.
"""

from __future__ import annotations

from fractal.control import Steering
from fractal.domain.run.outcome import Status, StepOutcome
from fractal.domain.signals import Signal

__all__ = ["Park", "Steering", "wait_signal"]


class Park(Exception):
    """Unwind to the supervisor, which parks the run (pause): rows stay open, nothing is
    committed, the pane exits. ``where`` says where the loop stood (``during PLAN``)."""

    def __init__(self, where: str) -> None:
        self.where = where
        super().__init__(f"paused {where}")


def wait_signal(steering: Steering, what: str) -> StepOutcome | None:
    """Act on the run's signals at a wake of a wait (``what``: ``waiting for the usage
    window``): a pause raises Park (``while <what>``), a finish or a stop ends the wait
    ``stopped`` with its reason (``finish requested <what>``, ``stopped <what>``); None
    when the wait goes on."""
    signal = steering.check(allow_finish=True)
    if signal is Signal.PAUSE:
        raise Park(f"while {what}")
    if signal is Signal.FINISH:
        return StepOutcome(Status.STOPPED, 0, f"finish requested {what}")
    if signal is Signal.STOP:
        return StepOutcome(Status.STOPPED, 0, f"stopped {what}")
    return None
