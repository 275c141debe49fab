"""The agent step's usage-window wait (a ``LaunchWait``): a launch stopped by a closed
subscription window is waited out until it reopens (``runtime.usagewait``), another
node's closed window is waited for before a launch, and a step whose last report said
the window was used past ``usage_pause_at`` waits for its reset before launching again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fractal.agents.base import WindowEvent
from fractal.domain.usage import UsageWarning, should_pause_early
from fractal.runtime.kinds.base import StepPlan, StepResult, wait_ended
from fractal.runtime.launch import AttemptResult
from fractal.runtime.loopparts import LoopPart, LoopParts
from fractal.runtime.usagewait import UsageWait

if TYPE_CHECKING:
    from fractal.runtime.kinds.kit import StepKit

__all__ = ["UsageWindowWait"]


class UsageWindowWait(LoopPart):
    """The usage window as a wait of the run's agent steps; the one writer of
    ``warning``, the last near-limit usage report of a step (None: none)."""

    what = "the usage window"

    def __init__(self, parts: LoopParts, kit: StepKit) -> None:
        super().__init__(parts)
        self.usage: UsageWait = kit.usage
        self.warning: WindowEvent | None = None

    def before(self, plan: StepPlan) -> StepResult | None:
        """Wait for the reset of a window the last step found nearly used up, then while
        another node found this credential's window closed (or probes it)."""
        early = self._pause_early(plan)
        if early is not None:
            return early
        ended = self.usage.before_launch(plan.file.name)
        return None if ended is None else wait_ended(ended, self.usage.ending, launched=False)

    def holds(self, result: AttemptResult) -> bool:
        """Reopen the window when this launch was its probe and got through; keep the
        launch's near-limit report; True when the CLI reported the window closed."""
        self.usage.after_launch(result.launched and result.window is None)
        if result.window is None:
            self.warning = result.warning
            return False
        return True

    def wait_out(self, plan: StepPlan, result: AttemptResult) -> StepResult | None:
        """Wait out the window ``result`` found closed (its row closes ``paused``)."""
        assert result.window is not None
        return self._wait(result.window, plan, result.step_id)

    def _wait(self, window: WindowEvent, plan: StepPlan,
              step_id: int | None = None) -> StepResult | None:
        ended = self.usage.wait_out(window, plan.file.name, step_id)
        return None if ended is None else wait_ended(ended, self.usage.ending, launched=True)

    def _pause_early(self, plan: StepPlan) -> StepResult | None:
        """When the last step reported its usage window used at or above
        ``usage_pause_at``, wait for its reset first (as a closed window). None: launch."""
        warning = self.warning
        if warning is None or warning.utilization is None:
            return None
        seen = UsageWarning(warning.utilization, warning.window, warning.resets_at)
        if not should_pause_early(seen, self.state.live.usage_pause_at):
            return None
        self.warning = None
        self.reporter.notice(f"usage window {round(warning.utilization * 100)}% used: "
                             f"waiting for its reset before {plan.file.name}")
        return self._wait(WindowEvent(True, warning.window, warning.resets_at), plan)
