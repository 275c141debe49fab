"""The children wait (frontmatter ``wait: children``): before the step runs, the loop
holds until no direct child of the node is live. It is the first row of the kinds
table and passes the step on (to the kind that runs it) once the wait released, or at
once when no child was live (no row then).

Its own ``WAIT`` row closes ``completed`` (``waited for 2 children (5m)``), ``stopped``
(a stop or finish, or the node's own ``node done``: ``done while waiting for children``,
and the run then ends ``completed`` with the done's reason), or ``exited`` 124 past the
walls; a pause parks it (``paused``) and
the resumed iteration waits again before the same step. It looks at the tree every
``wait`` window, and at once when a child's approval gate starts pending; a look runs a
SYNC only when the tree holds news since the last SYNC (``Sync.while_waiting``).
"""

from __future__ import annotations

from fractal.domain.run.outcome import EXIT_TIMEOUT, Status, StepOutcome
from fractal.domain.steps.waits import WAIT_STEP, wait_reason, waiting_detail, waits_for_children
from fractal.runtime.gates import WaitEnd, await_children, waiting_children
from fractal.runtime.kinds.base import RunEnding, StepCall, StepPlan, StepResult
from fractal.runtime.kinds.kit import KindPart
from fractal.runtime.steering import Park

__all__ = ["ChildrenWait"]


class ChildrenWait(KindPart):
    """Holds a ``wait: children`` step until the node's children settled."""

    def claims(self, plan: StepPlan) -> bool:
        """Steps whose frontmatter says ``wait: children``."""
        return waits_for_children(plan.frontmatter.fields)

    def syncs_before(self, plan: StepPlan) -> bool:
        """No SYNC before the wait: the step's own kind gets one after it."""
        return False

    def run(self, call: StepCall) -> StepResult | None:
        """Wait (see the module docstring). None when the wait released or no child was
        live; else the result that ends the step before it ran (``before`` = ``WAIT``).
        Raises Park on a pause."""
        plan, branch = call.plan, self.boot.paths.branch
        waiting = waiting_children(self.ledger, branch)
        if not waiting:
            return None
        step_id = self.ledger.open_step(
            node=branch, run_id=self.state.run_id, iter_id=self.state.iter_id,
            step=plan.file.position, step_name=WAIT_STEP, agent=None, model=None, session=None)
        banner = f"WAIT (before {plan.file.name})"
        self.reporter.banner_open(banner)
        self.reporter.notice(waiting_detail(waiting))
        started = self.clock.monotonic()
        sync = self.kit.sync
        end = await_children(self.ledger, branch, steering=self.steering, waker=self.waker,
                             deadline=self.kit.launches.wall,
                             window=float(self.state.live.wait),
                             sync=(lambda: sync.while_waiting(plan.file, call.node_md,
                                                              what="waiting for children"))
                             if self.boot.sync else None)
        took = self.clock.monotonic() - started
        if end is WaitEnd.PAUSED:
            self.ledger.close_step(step_id, Status.PAUSED.value, 0, "waiting for children")
            self.close_banner(banner, StepOutcome(Status.PAUSED, 0, ""), None, started)
            raise Park(f"while waiting for children before {plan.file.name}")
        if end is WaitEnd.RELEASED:
            outcome = StepOutcome(Status.COMPLETED, 0, wait_reason(len(waiting), took))
        elif end is WaitEnd.DONE:  # the node's own word: its run ends, the children stay
            outcome = StepOutcome(Status.STOPPED, 0, "done while waiting for children")
        elif end in (WaitEnd.STOPPED, WaitEnd.FINISHED):
            what = "finish requested" if end is WaitEnd.FINISHED else "stopped"
            outcome = StepOutcome(Status.STOPPED, 0, f"{what} waiting for children")
        else:
            outcome = StepOutcome(Status.EXITED, EXIT_TIMEOUT, "timed out waiting for children")
        self.ledger.close_step(step_id, outcome.status.value, outcome.exit_code, outcome.reason)
        self.close_banner(banner, outcome, took, started)
        if end is WaitEnd.RELEASED:
            return None
        ending = self.kit.usage.ending  # a SYNC's usage-window wait ended the run
        return StepResult(outcome, took, True, stopped=end is WaitEnd.STOPPED,
                          finished=end is WaitEnd.FINISHED, done=end is WaitEnd.DONE,
                          ending=None if ending is None else RunEnding(ending),
                          before=WAIT_STEP, during=f"waiting for children before {plan.file.name}")
