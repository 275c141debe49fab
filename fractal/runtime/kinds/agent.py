"""The agent step: the fallback row of the kinds table, every step no other kind claims.

A step's launch is refused before any attempt when it cannot run (a bad ``agent:`` or
``provider:`` override, a missing binary, a route without its key, a cost cap that cannot
be tracked); a failed launch is retried ``step_retries`` more times, ``step_retry_backoff``
seconds apart, each attempt its own row; what the step waits out instead of failing (a
closed usage window) is its list of waits (``WAITS``, see ``kinds.waits``); a
``requires_approval`` step then holds its approval gate (``runtime.approval``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping

from fractal.agents.base import binary_problem
from fractal.domain.errors import FractalError
from fractal.domain.frontmatter import is_true
from fractal.domain.outcome import EXIT_CANNOT_EXEC, Status, StepOutcome, clip_reason
from fractal.domain.signals import Signal
from fractal.domain.steps import banner_label, step_label
from fractal.runtime.kinds.base import StepCall, StepPlan, StepResult
from fractal.runtime.kinds.kit import KindPart, StepKit
from fractal.runtime.kinds.outage import ProviderOutageWait
from fractal.runtime.kinds.usagewindow import UsageWindowWait
from fractal.runtime.kinds.waits import LaunchWait
from fractal.runtime.launch import AttemptResult
from fractal.runtime.loopparts import LoopParts
from fractal.runtime.steering import Park
from fractal.runtime.stepbuild import step_backend, step_route

__all__ = ["WAITS", "AgentStep"]

WAITS: tuple[Callable[[LoopParts, StepKit], LaunchWait], ...] = (UsageWindowWait,
                                                                  ProviderOutageWait)
"""The agent step's waits, consulted in this order (each built with the run's parts and
kit; a new one is a class with the ``LaunchWait`` shape and a row here)."""


class AgentStep(KindPart):
    """Runs a step as agent launches (see the module docstring). Raises Park on a pause."""

    def __init__(self, parts: LoopParts, kit: StepKit) -> None:
        super().__init__(parts, kit)
        self.waits: tuple[LaunchWait, ...] = tuple(wait(parts, kit) for wait in WAITS)

    def claims(self, plan: StepPlan) -> bool:
        """Every step: the agent step is the table's fallback row."""
        return True

    def syncs_before(self, plan: StepPlan) -> bool:
        """A SYNC runs before every agent step (when the node has ``sync`` on)."""
        return True

    def run(self, call: StepCall) -> StepResult:
        """Run the step; the iteration's last step starts the backstop's status as soon as
        its agent exits (``StatusAhead``)."""
        ahead = self.kit.launches.ahead
        ahead.arm(call.last)
        try:
            return self.run_step(call.plan, call.node_md)
        finally:
            ahead.arm(False)

    def run_step(self, plan: StepPlan, node_md: str) -> StepResult:
        """Run ``plan`` as an agent step, retrying failed launches ``step_retries`` times,
        then hold its approval gate when it has one. Raises Park when a pause interrupts
        it."""
        fm = plan.frontmatter.fields
        banner = banner_label(plan.file)
        self.reporter.banner_open(banner)
        started = self.clock.monotonic()
        refused = self._refusal(fm)
        if refused is not None:
            code, refusal = refused
            self.ledger.book_closed_step(
                node=self.boot.paths.branch, run_id=self.state.run_id, iter_id=self.state.iter_id,
                step=plan.file.position, step_name=plan.file.name, status=Status.FAILED.value,
                exit_code=code, reason=refusal, cost=0.0)
            outcome = StepOutcome(Status.FAILED, code, refusal)
            self.close_banner(banner, outcome, None, started)
            return StepResult(outcome, None, False)
        # a gate of the run's start stays one; reserve mode never skips a gate
        gated = is_true(fm.get("requires_approval")) or plan.file.name in self.state.gates
        attempts = 1 + max(0, self.boot.step_retries)
        result: AttemptResult | None = None
        limit: float | None = None
        number = 1
        while True:
            early = self._wait_before(plan)
            if early is not None:
                self.close_banner(banner, early.outcome, None, started)
                return early
            limit = self.kit.launches.limit(fm)
            result = self.kit.launches.run(
                plan.file, plan.frontmatter.body, fm, node_md, limit, number,
                label=step_label(plan.file), suffix="" if number == 1 else f"-{number}",
                gated=gated)
            waiting = [wait for wait in self.waits if wait.holds(result)]
            if waiting:  # waited out, then re-entered: the same attempt, no retry spent
                self.close_banner(banner, result.outcome, limit, started)
                ended = waiting[0].wait_out(plan, result)
                if ended is not None:
                    return ended
                self.reporter.banner_open(f"{banner}, re-entered after {waiting[0].what}")
                continue
            if result.outcome.status is Status.PAUSED:
                self.close_banner(banner, result.outcome, limit, started)
                raise Park(f"during {plan.file.name}")
            if result.outcome.status is not Status.FAILED or number >= attempts:
                break
            number += 1
            self.reporter.notice(f"retrying {plan.file.name} in {self.boot.step_retry_backoff}s "
                                 f"(attempt {number} of {attempts})")
            if not self._backoff(self.boot.step_retry_backoff):
                break  # a stop ended the retries: the last failure stands
        assert result is not None
        step = StepResult(result.outcome, limit, result.launched)
        if gated and result.outcome.status is Status.COMPLETED:
            step = self.kit.approval.hold(plan, result.step_id, limit, node_md)
        self.close_banner(banner, step.outcome, limit, started)
        return step

    def _wait_before(self, plan: StepPlan) -> StepResult | None:
        """The first wait that ends the step before its launch; None: launch now."""
        for wait in self.waits:
            ended = wait.before(plan)
            if ended is not None:
                return ended
        return None

    def _refusal(self, fm: Mapping[str, str]) -> tuple[int, str] | None:
        """(exit code, reason) when the step cannot launch, checked before any attempt: a
        ``detached:`` key in a detached node, a bad agent or provider override, a missing
        binary, a route without its key, an unpriceable launch under armed cost caps. A bad
        override fails the step, never the run."""
        if self.boot.detached and fm.get("detached"):
            return 1, "detached: frontmatter is not allowed in a detached node"
        try:
            backend = step_backend(self.boot, fm)
        except FractalError as exc:
            return 1, clip_reason(f"invalid agent override: {exc}")
        problem = binary_problem(backend.binary(), self.boot.paths.worktree) \
            if "agent" in fm else None
        if problem is not None:
            return EXIT_CANNOT_EXEC, clip_reason(f"{problem} (from the step's agent: "
                                                 "frontmatter)")
        try:
            provider = step_route(self.boot, backend, fm)
        except FractalError as exc:
            return 1, clip_reason(f"invalid provider override: {exc}")
        problem = backend.preflight(provider, self.boot.launch_env or os.environ)
        if problem is None:
            problem = self.budget.refusal(backend, fm.get("model") or self.state.live.model,
                                          provider)
        return None if problem is None else (1, clip_reason(problem))

    def _backoff(self, seconds: int) -> bool:
        """Sleep before a retry, reacting to signals at every wake (1 s ticks at most).

        Raises Park on a pause; returns False when a stop (or finish) cut it short."""
        end = self.clock.monotonic() + seconds
        while (left := end - self.clock.monotonic()) > 0:
            signal = self.steering.check(allow_finish=False)
            if signal is Signal.PAUSE:
                raise Park("during a retry backoff")
            if signal is Signal.STOP or self.budget.ceiling_crossed():
                return False  # a failed step never buys another attempt once the budget is spent
            self.waker.wait(min(1.0, left))
        return True
