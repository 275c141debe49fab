"""The approval gate: a ``requires_approval`` step's row stays open after its agent
succeeded until the parent approves it (``fractal node approve``). The gate is held by
the agent step after its launch and, when a resume re-enters a gate parked unapproved,
by the iteration itself (a fresh gated row, then the same wait).
"""

from __future__ import annotations

from fractal.domain.outcome import AWAITING_APPROVAL, EXIT_TIMEOUT, Status, StepOutcome
from fractal.domain.signals import Signal
from fractal.domain.steps import banner_label, banner_verdict
from fractal.runtime.gates import WaitEnd, await_approval
from fractal.runtime.kinds.base import RunEnding, StepPlan, StepResult
from fractal.runtime.launches import Launches
from fractal.runtime.loopparts import LoopPart, LoopParts
from fractal.runtime.notices import post_gate_waiting
from fractal.runtime.steering import Park
from fractal.runtime.sync import Sync
from fractal.runtime.usagewait import UsageWait

__all__ = ["ApprovalGate"]


class ApprovalGate(LoopPart):
    """Holds the run's approval gates; the one writer of ``RunState.held_gate``."""

    def __init__(self, parts: LoopParts, launches: Launches, sync: Sync,
                 usage: UsageWait) -> None:
        super().__init__(parts)
        self.launches = launches
        self.sync = sync
        self.usage = usage

    def hold(self, plan: StepPlan, step_id: int, limit: float | None,
             node_md: str) -> StepResult:
        """Wait for the parent's approval of ``step_id`` and close its row accordingly
        (released: completed; stopped or finished: stopped; past the walls: exited 124).
        Raises Park on a pause (the row is parked ``awaiting approval``)."""
        self.ledger.mark_awaiting_approval(step_id)  # pending from now; a heal keeps it
        # A stop or finish already pending closes the gate at once: announcing it would
        # hand the parent an approve command for a step that is gone a moment later.
        if self.steering.check() not in (Signal.STOP, Signal.FINISH):
            self.reporter.notice(f"{plan.file.name} awaits approval "
                                 f"(fractal node approve {self.boot.paths.branch} {step_id})")
            post_gate_waiting(self.ledger, self.boot.paths, plan.file.name, step_id)
        self.state.held_gate = step_id  # left set when an interruption unwinds the wait
        end = await_approval(self.ledger, step_id, steering=self.steering, waker=self.waker,
                             deadline=self.launches.wall, window=float(self.state.live.wait),
                             sync=(lambda: self.sync.while_waiting(plan.file, node_md))
                             if self.boot.sync else None)
        self.state.held_gate = None
        if end is WaitEnd.RELEASED:
            self.ledger.close_step(step_id, Status.COMPLETED.value, 0, "")
            return StepResult(StepOutcome(Status.COMPLETED, 0, ""), limit, True)
        if end is WaitEnd.PAUSED:
            self.ledger.park_step(step_id, self.boot.paths.branch, 0, AWAITING_APPROVAL)
            raise Park(f"while {plan.file.name} awaited approval")
        if end in (WaitEnd.STOPPED, WaitEnd.FINISHED):
            finished = end is WaitEnd.FINISHED
            reason = f"{'finish requested' if finished else 'stopped'} {AWAITING_APPROVAL}"
            self.ledger.close_step(step_id, Status.STOPPED.value, 0, reason)
            ending = self.usage.ending  # a SYNC's usage-window wait ended the run
            return StepResult(StepOutcome(Status.STOPPED, 0, reason), limit, True, stopped=True,
                              finished=finished,
                              ending=None if ending is None else RunEnding(ending))
        reason = f"timed out {AWAITING_APPROVAL}"
        self.ledger.close_step(step_id, Status.EXITED.value, EXIT_TIMEOUT, reason)
        return StepResult(StepOutcome(Status.EXITED, EXIT_TIMEOUT, reason), limit, True)

    def resume(self, plan: StepPlan, node_md: str) -> StepResult:
        """Re-enter a gate that was parked unapproved: a fresh gated row, then the wait."""
        step_id = self.ledger.open_step(
            node=self.boot.paths.branch, run_id=self.state.run_id, iter_id=self.state.iter_id,
            step=plan.file.position, step_name=plan.file.name, agent=self.boot.backend.name,
            model=self.state.live.model, session=None, gated=True)
        banner = banner_label(plan.file)
        self.reporter.banner_open(f"{banner}, resumed {AWAITING_APPROVAL}")
        started = self.clock.monotonic()
        result = self.hold(plan, step_id, None, node_md)
        self.reporter.banner_close(banner, banner_verdict(result.outcome, None),
                                   self.clock.monotonic() - started)
        return result
