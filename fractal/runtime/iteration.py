"""One iteration: setup, step discovery, the steps in order, and the backstop commit of
whatever the agent left.

Each step runs inside the same shell, whatever its kind: the step's checkpoint (a pause
parks, a stop ends the iteration, a crossed cost ceiling queues no more steps), a
finish's drain before the last step, then the first kind of the table that claims it
(``runtime.kinds.KINDS``; a SYNC first when the kind asks for one), or the re-entered
approval gate a resume left parked. The kind's ``StepResult`` says how the iteration
goes on: a stop or finish it took, a run it ended, a failure.

The iteration runner is the one writer of the ``iter_*`` fields of ``RunState``: it opens
an iteration (number, start, timestamp, the iteration wall), re-enters a parked one on a
resume (``RunState.reentry``, consumed here), and lifts the iteration wall for a finish
drain.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from pathlib import Path

from fractal.domain.errors import StepFileError
from fractal.domain.prompt.render import iter_label
from fractal.domain.run.outcome import (
    EXIT_BUDGET_SKIP,
    RunEnd,
    Status,
    clip_reason,
    without_retry,
)
from fractal.domain.run.walls import iteration_deadline
from fractal.domain.signals import Signal
from fractal.domain.steps.files import discover_steps
from fractal.runtime.clock import stamp
from fractal.runtime.context import RunAbort, check_checkout
from fractal.runtime.edges import backstop, run_setup
from fractal.runtime.filecache import FILES, parse_step_file
from fractal.runtime.gates import WaitEnd, drain_children
from fractal.runtime.kinds.base import OVER_BUDGET, StepCall, StepKind, StepPlan, StepResult
from fractal.runtime.kinds.kit import StepKit
from fractal.runtime.kinds.table import KINDS
from fractal.runtime.loopparts import LoopPart, LoopParts
from fractal.runtime.steering import Park
from fractal.workspace.nodedir import OversizeFile, node_file_text

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class IterationResult:
    """How an iteration ended. ``setup_failed``/``discovery_failed`` feed crash-loop counts."""

    ok: bool
    reason: str
    setup_failed: bool = False
    discovery_failed: bool = False
    stopped: bool = False
    #: The subtree cost ceiling stopped the iteration (closed ``stopped``, the run winds down).
    budget: bool = False
    #: A finish ended an approval wait: the iteration closes ``stopped``, the run then
    #: ends at the boundary as a finish does (``completed`` once the children drained).
    finished: bool = False
    #: A step kind ended the run with the iteration (a pool's end, a usage window's).
    ending: RunEnd | None = None


def load_plans(steps_dir: Path) -> list[StepPlan]:
    """Discover and parse the step files (``NN-NAME.md``, run in order of NN).

    Raises StepFileError for a broken filename contract, RunAbort for a file that is
    not valid UTF-8 (the run ends exited, naming the file).
    """
    try:
        entries = list(steps_dir.iterdir())
    except OSError:
        entries = []
    names = [p.name for p in entries if p.is_file()]
    odd = sorted(p.name for p in entries if not p.is_file() and p.name.endswith(".md"))
    if odd:
        log.warning("ignoring step entries that are not regular files: %s", ", ".join(odd))
    plans: list[StepPlan] = []
    for step in discover_steps(names):
        try:  # parsed again only when the file changed (FILES)
            frontmatter, warnings = FILES.get(steps_dir / step.filename, parse_step_file)
        except UnicodeDecodeError as exc:
            raise RunAbort(f"step file {step.filename} is not valid UTF-8 "
                           f"(byte {exc.start}: {exc.reason})") from None
        except OversizeFile as exc:
            raise RunAbort(str(exc)) from None
        plans.append(StepPlan(step, frontmatter, warnings))
    return plans


WARNINGS_PER_FILE = 5  # frontmatter warnings shown per step file


class IterationRunner(LoopPart):
    """Runs one iteration of the run in ``state`` and records it. Raises Park (a pause:
    the iteration row stays open, nothing is committed) and RunAbort."""

    def __init__(self, parts: LoopParts) -> None:
        super().__init__(parts)
        self.kit = StepKit(parts)
        self.kinds: tuple[StepKind, ...] = tuple(self.kit.kind(row) for row in KINDS)
        self._warned: set[tuple[str, str]] = set()  # frontmatter warnings shown this run

    def run(self) -> IterationResult:
        """Open the next iteration (or, on a resume, re-enter ``state.reentry``), run and
        close it. Raises Park, RunAbort."""
        boot, state = self.boot, self.state
        reentry = state.reentry
        if reentry is None:
            state.iteration += 1
            state.iter_started = self.clock.monotonic()
            state.iter_timestamp = stamp(self.clock)
            state.iter_deadline = iteration_deadline(state.iter_started, boot.iter_timeout,
                                                     boot.interval)
            if not boot.detached:
                state.sessions.clear()
            state.iter_id = self.ledger.open_iteration(
                boot.paths.branch, state.run_id, state.iteration, agent=boot.agent_setting,
                model=state.live.model)
        else:
            state.iter_id = reentry.iter_id
            state.iter_started = reentry.started
            state.iter_timestamp = reentry.timestamp
            state.iter_deadline = reentry.deadline
        title = f"Iteration {iter_label(state.iteration, state.live.max_iters)}"
        resumed = " (resumed)" if reentry is not None else ""
        self.reporter.banner_open(f"{title}{resumed} at {stamp(self.clock)}", major=True)
        try:
            result = self._body()
        except RunAbort as exc:
            self.ledger.close_iteration(state.iter_id, Status.FAILED.value, 1, clip_reason(str(exc)))
            raise
        finally:
            state.reentry = None
            self.kit.launches.ahead.discard()  # a status nobody took (a park, an abort)
        if result.stopped or result.budget or result.finished:
            status, code = Status.STOPPED, 0
        else:
            status, code = (Status.COMPLETED, 0) if result.ok else (Status.FAILED, 1)
        self.ledger.close_iteration(state.iter_id, status.value, code, clip_reason(result.reason))
        outcome = {Status.COMPLETED: "completed", Status.STOPPED: "stopped"}.get(
            status, f"failed: {result.reason}")
        self.reporter.banner_close(title, outcome, self.clock.monotonic() - state.iter_started,
                                  major=True)
        return result

    # -- the body ---------------------------------------------------------------------

    def _body(self) -> IterationResult:
        """Setup, step discovery, then each step in order; the backstop commit closes it."""
        check_checkout(self.boot.paths)
        setup_error = run_setup(self.parts)
        if setup_error is not None:
            self._backstop("setup failed", setup_error)
            return IterationResult(False, setup_error, setup_failed=True)
        try:
            plans = load_plans(self.boot.paths.steps_dir)
        except StepFileError as exc:
            self.reporter.warning(f"iteration {self.state.iteration} failed: {exc}")
            self._backstop("auto", "")
            return IterationResult(False, str(exc), discovery_failed=True)
        self._warn_frontmatter(plans)
        node_md = self.node_md()
        reentry = self.state.reentry
        start = reentry.position if reentry is not None else 1
        for index, plan in enumerate(plans):
            if plan.file.position < start:
                continue  # done before the pause (a resume re-enters where it stopped)
            parked_gate = (reentry is not None and reentry.gate is not None
                           and plan.file.position == start)
            ended = self._step(plans, index, node_md, parked_gate=parked_gate)
            if ended is not None:
                return ended
        problem = self._backstop("auto", "")
        if problem is not None:  # the work is still on disk, but not on the branch
            return IterationResult(False, problem)
        return IterationResult(True, "")

    def _step(self, plans: list[StepPlan], index: int, node_md: str, *,
              parked_gate: bool) -> IterationResult | None:
        """Run ``plans[index]`` after its checkpoint (a pause parks, a stop ends the
        iteration, a crossed ceiling queues no more steps). Returns how the iteration ends
        when this step ends it, else None. ``parked_gate``: wait again at a gate a resume
        re-entered unapproved instead of running the step."""
        plan = plans[index]
        signal = self.steering.check(allow_finish=False, allow_stop=index > 0)
        if signal is Signal.PAUSE:
            raise Park(f"before {plan.file.name}")
        if signal is Signal.STOP:
            self._backstop("stopped", f"Stopped before {plan.file.name}.")
            return IterationResult(True, "Stopped by request", stopped=True)
        if signal is Signal.DONE:  # the node ended its own run: the loop's boundary ends it
            self._backstop("done", f"Done before {plan.file.name}.")
            return IterationResult(True, f"done before {plan.file.name}")
        over = self.budget.before_step(first=index == 0,
                                       finish_pending=self.steering.finish_requested)
        if over is not None:
            return self._over_budget(plans[index:], over)
        if parked_gate:
            return self._after_step(plans, index, self.kit.approval.resume(plan, node_md))
        last = index == len(plans) - 1
        if last and self.steering.finish_requested and not self._drain(node_md):
            self._backstop("stopped", "Stopped while draining children.")
            return IterationResult(True, "Stopped by request", stopped=True,
                                   ending=self.kit.usage.ending)
        call = StepCall(plan, node_md, last)
        for kind in self.kinds:
            if not kind.claims(plan):
                continue
            if self.boot.sync and kind.syncs_before(plan):
                sync = self.kit.sync.before(plan, node_md)
                if sync.stopped:  # its usage-window wait ended the run
                    return self._after_step(plans, index, sync)
                if sync.outcome.status is Status.EXITED:  # a timed-out SYNC is fatal
                    return self._fail(plans[index:], "SYNC", sync)
            result = kind.run(call)
            if result is not None:
                return self._after_step(plans, index, result)
        raise AssertionError("no step kind claimed " + plan.file.name)  # the agent row does

    def _after_step(self, plans: list[StepPlan], index: int,
                    result: StepResult) -> IterationResult | None:
        """How the iteration ends after ``plans[index]`` ended as ``result`` (None: go on):
        a wait before the step that held it, a run its kind ended, a finish or stop taken
        by its approval wait, a spent budget, a failure."""
        name = plans[index].file.name
        if result.before is not None:
            return self._after_wait(plans, index, result)
        ending = result.ending
        if ending is not None and result.stopped:  # a wait ended the run (a usage window)
            self._backstop("stopped", f"{name}: {ending.end.reason}.")
            return IterationResult(True, ending.end.reason, stopped=True, ending=ending.end)
        if ending is not None:  # the step did its work and there is no more (a pool's end)
            self._book_not_run(plans[index + 1:], ending.not_run)
            self._backstop("auto", "")
            return IterationResult(True, ending.end.reason, ending=ending.end)
        during = result.during or f"{name} awaited approval"
        if result.finished:
            self._backstop("finished", f"Finish requested while {during}.")
            return IterationResult(True, "Finished by request", finished=True)
        if result.stopped:
            self._backstop("stopped", f"Stopped while {during}.")
            return IterationResult(True, "Stopped by request", stopped=True)
        if result.outcome.reason == OVER_BUDGET:
            return self._over_budget(plans[index + 1:], self.budget.spent_out())
        if result.outcome.status is not Status.COMPLETED:
            return self._fail(plans[index + 1:], name, result)
        return None

    def _after_wait(self, plans: list[StepPlan], index: int,
                    result: StepResult) -> IterationResult:
        """How the iteration ends when a wait before ``plans[index]`` did not release
        (``result.before`` names its row): the node's own done, a stop or a finish winds
        it down, a timeout fails it (the step never ran)."""
        during = result.during or f"waiting before {plans[index].file.name}"
        ending = result.ending.end if result.ending is not None else None
        if result.done:  # the node ended its own run: the boundary's check ends the run
            self._backstop("done", f"Done while {during}.")
            return IterationResult(True, f"done while {during}")
        if result.finished:
            self._backstop("finished", f"Finish requested while {during}.")
            return IterationResult(True, "Finished by request", finished=True, ending=ending)
        if result.stopped:
            self._backstop("stopped", f"Stopped while {during}.")
            return IterationResult(True, "Stopped by request", stopped=True, ending=ending)
        return self._fail(plans[index:], result.before or "", result)

    def _warn_frontmatter(self, plans: list[StepPlan]) -> None:
        """Show each file's frontmatter warnings once per run (the files are re-read every
        iteration), at most WARNINGS_PER_FILE of them."""
        for plan in plans:
            name = f"steps/{plan.file.filename}"
            shown = list(plan.warnings[:WARNINGS_PER_FILE])
            if len(plan.warnings) > WARNINGS_PER_FILE:
                shown.append(f"... and {len(plan.warnings) - WARNINGS_PER_FILE} more")
            for mistake in shown:
                if (name, mistake) not in self._warned:
                    self._warned.add((name, mistake))
                    self.reporter.warning(f"{name}: {mistake}")

    def _drain(self, node_md: str) -> bool:
        """A finish drains the children before the last step; the iteration deadline is
        lifted for it, the run wall still bounds it. False when a stop ended the drain."""
        self.state.iter_deadline = None
        self.reporter.notice("finish requested: waiting for the children to finish")
        end = drain_children(self.ledger, self.boot.paths.branch, steering=self.steering,
                             waker=self.waker, deadline=lambda: self.state.run_deadline,
                             window=float(self.state.live.wait),
                             sync=(lambda: self.kit.sync.while_waiting(None, node_md))
                             if self.boot.sync else None)
        if end is WaitEnd.PAUSED:
            raise Park("while draining children")
        return end is not WaitEnd.STOPPED

    def _over_budget(self, not_run: list[StepPlan], reason: str) -> IterationResult:
        """The spend reached the ceiling mid-iteration: queue no more steps (each is booked
        ``stopped``/``over budget``), commit, and let the run wind down at the boundary."""
        self._book_not_run(not_run, OVER_BUDGET, EXIT_BUDGET_SKIP)
        self._backstop(OVER_BUDGET, reason)
        return IterationResult(True, reason, budget=True)

    def _book_not_run(self, plans: list[StepPlan], reason: str, exit_code: int = 0) -> None:
        """Book steps that will never run as rows opened and closed ``stopped``, cost 0.0
        (``exit_code`` 125 for steps the budget will not pay for)."""
        for plan in plans:
            self.ledger.book_closed_step(
                node=self.boot.paths.branch, run_id=self.state.run_id, iter_id=self.state.iter_id,
                step=plan.file.position, step_name=plan.file.name, status=Status.STOPPED.value,
                exit_code=exit_code, reason=reason, cost=0.0)

    def _fail(self, not_run: list[StepPlan], name: str, result: StepResult) -> IterationResult:
        outcome = result.outcome
        if outcome.reason.startswith("timed out"):
            if result.launched:
                reason = f"{name} timed out ({math.ceil(result.limit or 0)}s)"
            else:
                reason = "timed out"
            label = f"{name} timed out"
        else:
            why = without_retry(outcome.reason)  # the step failed, not only its retry
            reason = f"failed on {name}: {why}" if why else f"failed on {name}"
            label = f"failed on {name}"
        self._book_not_run(not_run, f"failed on {name}")
        body = f"{name}: {outcome.status.value} (exit {outcome.exit_code}) {outcome.reason}".strip()
        if not_run:
            body += "\n\nSteps not run: " + ", ".join(p.file.name for p in not_run)
        self._backstop(label, body)
        return IterationResult(False, reason)

    def node_md(self) -> str:
        """NODE.md's text ('' with a warning when it is missing or not a regular file);
        RunAbort past its size cap."""
        try:
            return node_file_text(self.boot.paths.node_md)
        except OversizeFile as exc:
            raise RunAbort(str(exc)) from None
        except OSError:
            self.reporter.warning(f"{self.boot.paths.node_md} is missing; prompts carry no task")
            return ""

    def leave_iteration(self) -> None:
        """The run is past its last iteration and held at its end (a hand-back's re-merge):
        no iteration is open, so a launch books its row to the run alone and only the run
        wall bounds it."""
        self.state.iter_id = None
        self.state.iter_deadline = None

    def _backstop(self, label: str, body: str) -> str | None:
        """Commit what is left; returns the failure (recorded as an event), or None."""
        state, paths = self.state, self.boot.paths
        subject = f"{paths.branch}: iteration {state.run_id}.{state.iteration} ({label})"
        sha, problem = backstop(paths.worktree, subject, body, self.reporter,
                                branch=paths.branch, pending=self.kit.launches.ahead.take())
        self.kit.launches.ahead.backstop_found(sha is not None or problem is not None)
        if problem is not None:
            self.ledger.add_event(paths.branch, "commit", actor="loop", status="failed",
                                  metadata=clip_reason(problem), run_id=state.run_id,
                                  iter_id=state.iter_id)
        return problem
