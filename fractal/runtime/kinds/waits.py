"""What the agent step waits out instead of failing a launch: the ``LaunchWait`` protocol.

The agent step consults its waits (``kinds.agent.WAITS``, in order) before every launch
and after every launch; a launch that ended on a wait's reason is not a failure and
spends no retry: the wait is waited out (the run's walls are credited as the wait
decides) and the same attempt is launched again. A new reason to wait (a provider
outage with its back-off) is one module with one class and one row in ``WAITS``.
"""

from __future__ import annotations

from typing import Protocol

from fractal.runtime.kinds.base import StepPlan, StepResult
from fractal.runtime.launch import AttemptResult

__all__ = ["LaunchWait"]


class LaunchWait(Protocol):
    """One reason an agent launch is waited for rather than run, failed or retried."""

    #: What the step was waiting for, as its banner says on re-entry
    #: (``03-BUILD, re-entered after the usage window``).
    what: str

    def before(self, plan: StepPlan) -> StepResult | None:
        """Before each launch of ``plan``: wait while this reason holds. None: launch now;
        a result (``stopped``) ends the step instead. Raises Park on a pause."""

    def holds(self, result: AttemptResult) -> bool:
        """Every launch's end is shown to every wait, in order; True when ``result``
        ended on this wait's reason (the agent step then calls ``wait_out``)."""

    def wait_out(self, plan: StepPlan, result: AttemptResult) -> StepResult | None:
        """Wait the reason of ``result`` out. None: launch the same attempt again; a result
        (``stopped``) ends the step. Raises Park on a pause."""
