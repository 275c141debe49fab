"""The agent step's provider-outage wait (a ``LaunchWait``): a launch that failed with a
transient API error (overloaded, a 5xx, a 429 that is not a usage window, a refused or
reset connection, a failed DNS lookup) is waited out with a doubling back-off and the
step re-entered (``runtime.outagewait``: no retry spent, no failed iteration counted), and
a credential another node found down is waited for before a launch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fractal.runtime.kinds.base import StepPlan, StepResult, wait_ended
from fractal.runtime.launch import AttemptResult
from fractal.runtime.loopparts import LoopPart, LoopParts
from fractal.runtime.outagewait import OutageWait

if TYPE_CHECKING:
    from fractal.runtime.kinds.kit import StepKit

__all__ = ["ProviderOutageWait"]


class ProviderOutageWait(LoopPart):
    """The provider outage as a wait of the run's agent steps (the run's one
    ``OutageWait``, shared with SYNC, holds its state)."""

    what = "the provider outage"

    def __init__(self, parts: LoopParts, kit: StepKit) -> None:
        super().__init__(parts)
        self.outage: OutageWait = kit.outage

    def before(self, plan: StepPlan) -> StepResult | None:
        """Wait while this credential's provider is down (found by another node, or by this
        one before a park). None: launch now (perhaps as the probe)."""
        ended = self.outage.before_launch()
        return None if ended is None else wait_ended(ended, None, launched=False)

    def holds(self, result: AttemptResult) -> bool:
        """True when the launch failed with a transient API error (the outage is recorded);
        a probe that got through ends the outage for every node on the credential."""
        return self.outage.after_launch(result)

    def wait_out(self, plan: StepPlan, result: AttemptResult) -> StepResult | None:
        """Wait out the outage the launch met, with its back-off (the failed launch's row
        stays ``failed``); None: launch the same attempt again."""
        ended = self.outage.wait_out()
        return None if ended is None else wait_ended(ended, None, launched=True)
