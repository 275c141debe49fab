"""Run one step of an iteration: launch it, retry a failed launch (``step_retries`` more
attempts, ``step_retry_backoff`` seconds apart, each its own row), hold an approval gate
(a ``requires_approval`` step's row stays open until the parent approves it), and run the
SYNC pseudo-steps (before each step, and every ``wait`` window while waiting), wait for
the children (``wait: children``) and wait out a closed usage window or a provider outage
(``outagewait``). Building each launch is ``stepbuild``'s job; running it ``run_attempt``'s.

Past the house's 400 lines on purpose: every wait a step can meet (a gate, the children,
a usage window, a retry's backoff) shares the step's banner, its SYNC and its row
bookkeeping, and splitting them would pass that state between modules.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from fractal.agents.base import Usage, WindowEvent, binary_problem
from fractal.assets import mode_text
from fractal.domain.durations import parse_duration
from fractal.domain.errors import FractalError
from fractal.domain.frontmatter import Frontmatter, is_true
from fractal.domain.outcome import (
    AWAITING_APPROVAL,
    EXIT_BUDGET_SKIP,
    EXIT_CANNOT_EXEC,
    EXIT_TIMEOUT,
    Status,
    StepOutcome,
    clip_reason,
)
from fractal.domain.signals import Signal
from fractal.domain.steps import StepFile, banner_label, banner_verdict, step_label
from fractal.domain.usage import UsageWarning, should_pause_early
from fractal.domain.waits import WAIT_STEP, wait_reason, waiting_detail
from fractal.domain.walls import effective_step_limit
from fractal.runtime.context import LoopPart, LoopParts, check_checkout
from fractal.runtime.costing import LaunchBudget
from fractal.runtime.gates import WaitEnd, await_approval, await_children, waiting_children
from fractal.runtime.launch import AttemptResult, LaunchKit, run_attempt
from fractal.runtime.notices import post_gate_waiting
from fractal.runtime.outagewait import OutageWait
from fractal.runtime.statusahead import StatusAhead
from fractal.runtime.steering import Park
from fractal.runtime.stepbuild import StepBuilder, step_backend, step_route
from fractal.runtime.usagewait import UsageWait
from fractal.store.timefmt import utc_now

OVER_BUDGET = "over budget"
"""Reason of a launch skipped because the per-step budget is spent (booked ``stopped``,
exit 125, cost 0.0)."""


@dataclass(frozen=True)
class StepPlan:
    """A discovered step file, its parsed frontmatter, and the likely mistakes in that
    frontmatter (``frontmatter_warnings``; shown, never fatal)."""

    file: StepFile
    frontmatter: Frontmatter
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class StepResult:
    """The final outcome of a step after retries; ``limit`` is the last effective limit (s);
    ``stopped`` marks a stop or finish that ended it cleanly (an approval wait), and
    ``finished`` tells the finish apart (the run then ends completed, not stopped)."""

    outcome: StepOutcome
    limit: float | None
    launched: bool
    stopped: bool = False
    finished: bool = False


def _ended(ended: StepOutcome | None, launched: bool) -> StepResult | None:
    """A usage-window or outage wait's end as the step's result (a finish: ``finished``)."""
    if ended is None:
        return None
    return StepResult(ended, None, launched, stopped=True,
                      finished=ended.reason.startswith("finish requested"))


class StepRunner(LoopPart):
    """Runs the steps of the current iteration of ``state``. Raises Park on a pause."""

    def __init__(self, parts: LoopParts) -> None:
        super().__init__(parts)
        # Token usage of each session so far, by session id: a CLI that reports cumulative
        # thread usage (codex) turns it into per-launch figures (LaunchRequest.prior_usage).
        self.session_usage: dict[str, Usage] = {}
        self.builder = StepBuilder(self.boot, self.state, self.ledger, self.session_usage,
                                   self.clock, spent=self.budget.run_spent)
        self._synced_at: str | None = None  # when the last SYNC started (stored UTC)
        #: Armed by the iteration runner for its last step (the backstop follows it).
        self.ahead = StatusAhead(self.boot.paths.worktree, self.clock)
        self.kit = LaunchKit(self.ledger, self.reporter, self.waker, self.clock,
                             parts.launcher, self.ahead)

    # -- work steps ---------------------------------------------------------------------

    def run_step(self, plan: StepPlan, node_md: str) -> StepResult:
        """Run a work step, retrying failed launches ``step_retries`` times, then hold its
        approval gate when it has one. Raises Park when a pause interrupts it."""
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
            self._close_banner(banner, outcome, None, started)
            return StepResult(outcome, None, False)
        gated = is_true(fm.get("requires_approval")) and not self.state.reserve
        attempts = 1 + max(0, self.boot.step_retries)
        result: AttemptResult | None = None
        limit: float | None = None
        number = 1
        while True:
            early = self._pause_early(plan) or self._window_closed(plan)
            if early is not None:
                self._close_banner(banner, early.outcome, None, started)
                return early
            limit = self._limit(fm)
            result = self._attempt(plan, node_md, limit, number, gated)
            UsageWait(self.parts).after_launch(result.launched and result.window is None)
            if (window := result.window) is not None or OutageWait(self.parts).after_launch(result):
                self._close_banner(banner, result.outcome, limit, started)  # wait, re-enter
                ended = self._wait_window(window, plan, result.step_id) if window else \
                    _ended(OutageWait(self.parts).wait_out(), True)  # runtime/outagewait.py
                if ended is not None:
                    return ended
                self.reporter.banner_open(f"{banner}, re-entered after the wait")
                continue  # the same attempt: no retry spent
            self.state.usage_warning = result.warning
            if result.outcome.status is Status.PAUSED:
                self._close_banner(banner, result.outcome, limit, started)
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
            step = self.hold_gate(plan, result.step_id, limit, node_md)
        self._close_banner(banner, step.outcome, limit, started)
        return step

    def _wait_window(self, window: WindowEvent, plan: StepPlan,
                     step_id: int | None = None) -> StepResult | None:
        """Wait out a closed window (``UsageWait.wait_out``); None: re-enter the step."""
        return _ended(UsageWait(self.parts).wait_out(window, plan.file.name, step_id), True)

    def _window_closed(self, plan: StepPlan) -> StepResult | None:
        """Before a launch: wait while another node found this credential's usage window
        closed (or probes it), or its provider down. None: launch now."""
        return _ended(UsageWait(self.parts).before_launch(plan.file.name)
                      or OutageWait(self.parts).before_launch(), False)

    def _pause_early(self, plan: StepPlan) -> StepResult | None:
        """Before a launch: when the last step reported its usage window used at or above
        ``usage_pause_at``, wait for its reset first (as a closed window). None: launch."""
        warning = self.state.usage_warning
        if warning is None or warning.utilization is None:
            return None
        seen = UsageWarning(warning.utilization, warning.window, warning.resets_at)
        if not should_pause_early(seen, self.state.live.usage_pause_at):
            return None
        self.state.usage_warning = None
        self.reporter.notice(f"usage window {round(warning.utilization * 100)}% used: "
                             f"waiting for its reset before {plan.file.name}")
        return self._wait_window(WindowEvent(True, warning.window, warning.resets_at), plan)

    def hold_gate(self, plan: StepPlan, step_id: int, limit: float | None,
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
                             deadline=self._wall, window=float(self.state.live.wait),
                             sync=(lambda: self.run_wait_sync(plan.file, node_md))
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
            return StepResult(StepOutcome(Status.STOPPED, 0, reason), limit, True, stopped=True,
                              finished=finished)
        reason = f"timed out {AWAITING_APPROVAL}"
        self.ledger.close_step(step_id, Status.EXITED.value, EXIT_TIMEOUT, reason)
        return StepResult(StepOutcome(Status.EXITED, EXIT_TIMEOUT, reason), limit, True)

    def resume_gate(self, plan: StepPlan, node_md: str) -> StepResult:
        """Re-enter a gate that was parked unapproved: a fresh gated row, then the wait."""
        step_id = self.ledger.open_step(
            node=self.boot.paths.branch, run_id=self.state.run_id, iter_id=self.state.iter_id,
            step=plan.file.position, step_name=plan.file.name, agent=self.boot.backend.name,
            model=self.state.live.model, session=None, gated=True)
        banner = banner_label(plan.file)
        self.reporter.banner_open(f"{banner}, resumed {AWAITING_APPROVAL}")
        started = self.clock.monotonic()
        result = self.hold_gate(plan, step_id, None, node_md)
        self._close_banner(banner, result.outcome, None, started)
        return result

    def wait_children(self, plan: StepPlan, node_md: str) -> StepResult | None:
        """Hold the loop before ``plan`` (``wait: children``) until no child of the node is
        live; None when none was (no row). Its own ``WAIT`` row closes ``completed``
        (``waited for 2 children (5m)``), ``stopped`` (a stop or finish), or ``exited`` 124
        past the walls; a pause parks it (``paused``) and raises Park, and the resumed
        iteration waits again before the same step."""
        branch = self.boot.paths.branch
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
        end = await_children(self.ledger, branch, steering=self.steering, waker=self.waker,
                             deadline=self._wall, window=float(self.state.live.wait),
                             sync=(lambda: self.run_wait_sync(plan.file, node_md,
                                                              what="waiting for children"))
                             if self.boot.sync else None)
        took = self.clock.monotonic() - started
        if end is WaitEnd.PAUSED:
            self.ledger.close_step(step_id, Status.PAUSED.value, 0, "waiting for children")
            self._close_banner(banner, StepOutcome(Status.PAUSED, 0, ""), None, started)
            raise Park(f"while waiting for children before {plan.file.name}")
        if end is WaitEnd.RELEASED:
            outcome = StepOutcome(Status.COMPLETED, 0, wait_reason(len(waiting), took))
        elif end in (WaitEnd.STOPPED, WaitEnd.FINISHED):
            what = "finish requested" if end is WaitEnd.FINISHED else "stopped"
            outcome = StepOutcome(Status.STOPPED, 0, f"{what} waiting for children")
        else:
            outcome = StepOutcome(Status.EXITED, EXIT_TIMEOUT, "timed out waiting for children")
        self.ledger.close_step(step_id, outcome.status.value, outcome.exit_code, outcome.reason)
        self._close_banner(banner, outcome, took, started)
        return StepResult(outcome, took, True, stopped=end is WaitEnd.STOPPED,
                          finished=end is WaitEnd.FINISHED)

    def book_not_run(self, plans: list[StepPlan], reason: str, exit_code: int = 0) -> None:
        """Book steps that will never run as rows opened and closed ``stopped``, cost 0.0
        (``exit_code`` 125 for steps the budget will not pay for)."""
        for plan in plans:
            self.ledger.book_closed_step(
                node=self.boot.paths.branch, run_id=self.state.run_id, iter_id=self.state.iter_id,
                step=plan.file.position, step_name=plan.file.name, status=Status.STOPPED.value,
                exit_code=exit_code, reason=reason, cost=0.0)

    # -- SYNC ---------------------------------------------------------------------------

    def run_sync(self, before: StepPlan, node_md: str) -> StepResult:
        """The strict SYNC before ``before``: a failure is non-fatal, a timeout fatal (the
        caller decides), a pause parks. Never retried; a closed usage window is waited
        out as for a step (``stopped`` when the run ends instead)."""
        banner = f"SYNC (before {before.file.name})"
        self.reporter.banner_open(banner)
        started = self.clock.monotonic()
        while True:  # a closed usage window is waited out, then the SYNC runs again
            early = self._window_closed(before)
            if early is not None:
                self._close_banner(banner, early.outcome, None, started)
                return early
            limit = self._limit({})
            result = self._run(before.file, self._sync_body(), {}, node_md, limit, 1,
                               label=f"SYNC before {step_label(before.file)}",
                               suffix="-sync", name="SYNC")
            UsageWait(self.parts).after_launch(result.launched and result.window is None)
            if result.window is None:
                break
            self._close_banner(banner, result.outcome, limit, started)
            ended = self._wait_window(result.window, before, result.step_id)
            if ended is not None:
                return ended
        self._close_banner(banner, result.outcome, limit, started)
        if result.outcome.status is Status.PAUSED:
            raise Park(f"during SYNC before {before.file.name}")
        return StepResult(result.outcome, limit, result.launched)

    def run_wait_sync(self, file: StepFile | None, node_md: str, *,
                      what: str | None = None) -> bool:
        """A lenient SYNC while waiting (approval or children: the awaited step's number; a
        drain: 0). It never fails the wait; a pause, stop or finish is left for the wait's
        own check. A closed usage window is waited out as for any launch; True when that
        ends the run (``state.usage_end`` says how)."""
        target = file or StepFile(filename="", prefix="", name="drain", position=0, total=0)
        what = what or (f"awaiting {target.name}" if file else "draining children")
        banner, started, usage = f"SYNC ({what})", self.clock.monotonic(), UsageWait(self.parts)
        self.reporter.banner_open(banner)
        try:
            while True:  # a closed usage window is waited out, then the SYNC runs again
                ended = usage.before_launch("SYNC")
                if ended is not None:
                    self._close_banner(banner, ended, None, started)
                    return self.state.usage_end is not None
                limit = self._limit({})
                result = self._run(target, self._sync_body(), {}, node_md, limit, 1,
                                   label=f"SYNC while {what}", suffix="-sync", name="SYNC",
                                   lenient=True)
                usage.after_launch(result.launched and result.window is None)
                if result.window is None:
                    break
                self._close_banner(banner, result.outcome, limit, started)
                ended = usage.wait_out(result.window, "SYNC", result.step_id)
                if ended is not None:
                    return self.state.usage_end is not None
                self.reporter.banner_open(f"{banner}, again after the usage window")
        except Park:
            return False  # the pause signal stays pending: the wait parks its own row
        self._close_banner(banner, result.outcome, limit, started)
        return False

    def _wall(self) -> float | None:
        """The nearer run or iteration deadline (clock s), moved by usage-wait credits."""
        return min([d for d in (self.state.run_deadline, self.state.iter_deadline)
                    if d is not None], default=None)

    def _sync_body(self) -> str:
        """SYNC.md plus the digest of what changed since the previous SYNC of this run."""
        from fractal.runtime.digest import sync_digest  # SYNC steps only

        since, self._synced_at = self._synced_at, utc_now()
        digest = sync_digest(self.ledger, self.boot.paths, since)
        return mode_text("SYNC") + ("\n" + digest if digest else "")

    # -- internals ----------------------------------------------------------------------

    def _attempt(self, plan: StepPlan, node_md: str, limit: float | None, number: int,
                 gated: bool) -> AttemptResult:
        return self._run(plan.file, plan.frontmatter.body, plan.frontmatter.fields, node_md,
                         limit, number, label=step_label(plan.file),
                         suffix="" if number == 1 else f"-{number}", gated=gated)

    def _run(self, file: StepFile, body: str, fm: Mapping[str, str], node_md: str,
             limit: float | None, number: int, *, label: str, suffix: str,
             name: str | None = None, gated: bool = False, lenient: bool = False) -> AttemptResult:
        check_checkout(self.boot.paths)  # every launch (steps, retries, SYNC, fixers) passes here
        cost = self._launch_budget(fm)
        if cost is not None and (cost.refusal or cost.skip) and (limit is None or limit > 0):
            return self._not_launched(file, name or file.name, cost.refusal)
        launch = self.builder.build(file, body, fm, node_md, limit, retry_number=number,
                                    label=label, snapshot_suffix=suffix, name=name, gated=gated,
                                    should_pause=self.steering.pause_pending, lenient=lenient,
                                    budget=cost)
        result = run_attempt(launch.attempt, self.kit, launch.env_for)
        self.budget.after_launch(launch.attempt.backend, name or file.name, result.cost,
                                 result.launched)
        resume = launch.attempt.request.resume
        # A minted id counts only once the agent echoed it: a CLI that died before
        # starting the session cannot be resumed into it.
        session = result.session or resume
        if session and result.usage is not None:
            before = launch.prior if session == resume and launch.prior is not None else (0, 0, 0)
            self.session_usage[session] = (before[0] + result.usage[0],
                                           before[1] + result.usage[1],
                                           before[2] + result.usage[2])
        if session and not launch.detached and result.launched:
            self.state.sessions[launch.session_key] = session
            if launch.session_key == self.boot.agent_setting and self.state.iter_id is not None:
                self.ledger.set_iteration_session(self.state.iter_id, session)
        return result

    def _launch_budget(self, fm: Mapping[str, str]) -> LaunchBudget | None:
        """The cost side of a launch under ``fm`` (None when its agent override is invalid:
        building the launch reports that)."""
        try:
            backend = step_backend(self.boot, fm)
            provider = step_route(self.boot, backend, fm)
        except FractalError:
            return None
        return self.budget.launch(backend, fm.get("model") or self.state.live.model, provider)

    def _not_launched(self, file: StepFile, name: str, refusal: str | None) -> AttemptResult:
        """Book a launch that never happens: a cost cap that cannot be tracked (failed, exit
        1) or a spent budget (``stopped``, exit 125, ``over budget``); cost 0.0 either way."""
        if refusal is not None:
            outcome = StepOutcome(Status.FAILED, 1, clip_reason(refusal))
        else:
            outcome = StepOutcome(Status.STOPPED, EXIT_BUDGET_SKIP, OVER_BUDGET)
        step_id = self.ledger.book_closed_step(
            node=self.boot.paths.branch, run_id=self.state.run_id, iter_id=self.state.iter_id,
            step=file.position, step_name=name, status=outcome.status.value,
            exit_code=outcome.exit_code, reason=outcome.reason, cost=0.0)
        return AttemptResult(step_id, outcome, None, 0.0, None, 0.0, False)

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

    def _limit(self, fm: Mapping[str, str]) -> float | None:
        step_timeout = self.state.live.step_timeout
        if "timeout" in fm:
            try:
                step_timeout = parse_duration(fm["timeout"], "timeout")
            except FractalError as exc:
                self.reporter.warning(f"{exc}; using the node's step_timeout instead")
        return effective_step_limit(self.clock.monotonic(), self.state.run_deadline,
                                    self.state.iter_deadline, step_timeout)

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

    def _close_banner(self, banner: str, outcome: StepOutcome, limit: float | None,
                      started: float) -> None:
        self.reporter.banner_close(banner, banner_verdict(outcome, limit),
                                   self.clock.monotonic() - started)
