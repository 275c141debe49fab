"""The worker pool's DISPATCH step (frontmatter ``pool: dispatch``): fractal is the
dispatcher, no agent runs it.

The step runs rounds of ``fractal pool dispatch`` (the verb claims items, starts and
merges workers; see ``lifecycle/pool.py``; the first round of each step also applies the
resume rule) as a helper process of the node's loop, and between rounds waits until one
of the claimed items' workers has settled. The wait
is the loop's own (the waker, at least one database poll a second): a pause parks the
run (the resumed run dispatches again, and the verb's resume rule handles the claims
whose worker never ran), a stop or finish ends the step ``stopped``, the run and
iteration walls end it ``exited`` 124. One row per step: ``DISPATCH`` closes
``completed`` with ``review: ...`` (the REVIEW step runs next) or with the pool's end
(``pool: N done, M failed``): the step's result then ends the run ``completed`` with that
reason, and the iteration's remaining steps are booked ``stopped`` (``pool ended``).
"""

from __future__ import annotations

import json
import sys

from fractal.domain.checks.rules import CheckKind
from fractal.domain.pool import ItemStatus
from fractal.domain.run.outcome import EXIT_TIMEOUT, RunEnd, Status, StepOutcome, clip_reason
from fractal.domain.states import SETTLED
from fractal.domain.steps.files import banner_label
from fractal.procs import commands
from fractal.runtime.checks import check_env
from fractal.runtime.gates import WaitEnd, await_released
from fractal.runtime.kinds.base import RunEnding, StepCall, StepPlan, StepResult
from fractal.runtime.kinds.kit import KindPart
from fractal.runtime.steering import Park
from fractal.store.pool import PoolStore

__all__ = ["ROUND_TIMEOUT", "PoolDispatch"]

ROUND_TIMEOUT = 300.0
"""Seconds one dispatch round may take (it starts at most six workers, each within the
start verb's own boot wait)."""
POOL_ENDED = "pool ended"
"""Reason the steps after a DISPATCH that ended the pool are booked ``stopped`` with."""


class PoolDispatch(KindPart):
    """Runs the DISPATCH step of a pool node. Raises Park on a pause."""

    def claims(self, plan: StepPlan) -> bool:
        """The pool's dispatcher step (``pool: dispatch`` in its frontmatter)."""
        return plan.frontmatter.fields.get("pool", "").strip() == "dispatch"

    def syncs_before(self, plan: StepPlan) -> bool:
        """No SYNC: no agent runs the dispatcher."""
        return False

    def run(self, call: StepCall) -> StepResult:
        """Dispatch rounds until the pool reviews or ends (see the module docstring)."""
        plan, paths, state = call.plan, self.boot.paths, self.state
        step_id = self.ledger.open_step(
            node=paths.branch, run_id=state.run_id, iter_id=state.iter_id,
            step=plan.file.position, step_name=plan.file.name, agent=None, model=None,
            session=None)
        banner = banner_label(plan.file)
        self.reporter.banner_open(banner)
        started = self.clock.monotonic()
        outcome, ended = self._rounds(step_id)
        self.ledger.close_step(step_id, outcome.status.value, outcome.exit_code,
                               outcome.reason, cost=0.0)
        took = self.clock.monotonic() - started
        text = "done" if outcome.status is Status.COMPLETED else outcome.status.value
        self.reporter.banner_close(banner, f"{text} ({outcome.reason})", took)
        if outcome.status is Status.PAUSED:
            raise Park(f"during {plan.file.name}")
        stopped = outcome.status is Status.STOPPED
        ending = None if not ended else RunEnding(
            RunEnd(Status.COMPLETED, Status.COMPLETED, 0, outcome.reason), POOL_ENDED)
        return StepResult(outcome, took, True, stopped=stopped,
                          finished=stopped and outcome.reason.startswith("finish"),
                          ending=ending)

    def _rounds(self, step_id: int) -> tuple[StepOutcome, bool]:
        """Dispatch rounds and the waits between them: the step's outcome, and True when
        the pool ended (nothing left to dispatch or review)."""
        first = ["--resume"]  # the step's first round: no other round of it is running
        while True:
            self.reporter.release()  # a round runs a process: show what came before it
            code, out = commands.run_capture(
                [sys.executable, "-P", "-m", "fractal", "pool", "dispatch", *first],
                cwd=self.boot.paths.worktree, env=self._env(), timeout=ROUND_TIMEOUT)
            first = []
            lines = [ln for ln in out.splitlines() if ln.strip()]
            for line in lines[:-1]:
                self.reporter.notice(f"pool: {line}")
            try:
                done = json.loads(lines[-1]) if code == 0 and lines else None
            except ValueError:
                done = None
            if not isinstance(done, dict):
                tail = lines[-1] if lines else f"exit {code}"
                return StepOutcome(Status.FAILED, code or 1,
                                   clip_reason(f"dispatch failed: {tail}")), False
            reason = str(done.get("reason", ""))
            if done.get("next") == "review":
                return StepOutcome(Status.COMPLETED, 0, clip_reason(f"review: {reason}")), False
            if done.get("next") == "end":
                return StepOutcome(Status.COMPLETED, 0, clip_reason(reason)), True
            ended = self._wait()
            if ended is not None:
                return ended, False

    def _env(self) -> dict[str, str]:
        env = check_env(self.boot, self.state, CheckKind.GATE)
        env.pop("CHECK_KIND", None)
        env["_NODE"] = str(self.boot.paths.node_dir)  # the verb acts as this node's loop
        return env

    def _wait(self) -> StepOutcome | None:
        """Wait until a claimed item's worker has settled (its run ended); None: dispatch
        again."""
        store = PoolStore(self.boot.paths.tree.db_path)
        branch = self.boot.paths.branch

        def settled() -> bool:
            statuses = {r.node: r.status for r in self.ledger.nodes()}
            claimed = [i.worker for i in store.items(branch)
                       if i.status is ItemStatus.CLAIMED]
            return any(statuses.get(w or "") in SETTLED for w in claimed) or not claimed

        end = await_released(settled, steering=self.steering, waker=self.waker,
                             deadline=self.kit.launches.wall())
        if end is WaitEnd.RELEASED:
            return None
        if end is WaitEnd.PAUSED:
            return StepOutcome(Status.PAUSED, 0, "waiting for workers")
        if end in (WaitEnd.STOPPED, WaitEnd.FINISHED):
            what = "finish requested" if end is WaitEnd.FINISHED else "stopped"
            return StepOutcome(Status.STOPPED, 0, f"{what} waiting for workers")
        return StepOutcome(Status.EXITED, EXIT_TIMEOUT, "timed out waiting for workers")
