"""One iteration: setup, step discovery, the steps in order (each preceded by SYNC when
enabled), and the backstop commit of whatever the agent left.

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
from fractal.domain.outcome import EXIT_BUDGET_SKIP, Status, clip_reason, without_retry
from fractal.domain.render import iter_label
from fractal.domain.signals import Signal
from fractal.domain.steps import discover_steps
from fractal.domain.waits import WAIT_STEP, waits_for_children
from fractal.domain.walls import iteration_deadline
from fractal.errors import FractalError
from fractal.procs import commands
from fractal.runtime import sandboxing
from fractal.runtime.checks import is_gate, run_gate
from fractal.runtime.clock import stamp
from fractal.runtime.context import RunAbort, check_checkout
from fractal.runtime.filecache import FILES, parse_step_file
from fractal.runtime.fixers import FixerRunner
from fractal.runtime.gates import WaitEnd, drain_children
from fractal.runtime.loopparts import LoopPart, LoopParts
from fractal.runtime.pane import Reporter
from fractal.runtime.pooldispatch import PoolDispatch, is_dispatch
from fractal.runtime.steering import Park
from fractal.runtime.steprunner import OVER_BUDGET, StepPlan, StepResult, StepRunner
from fractal.workspace.backstop import backstop_commit
from fractal.workspace.commit_types import UnresolvedConflict
from fractal.workspace.status_ahead import PendingStatus

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
        plans.append(StepPlan(step, frontmatter, warnings))
    return plans


WARNINGS_PER_FILE = 5  # frontmatter warnings shown per step file


class IterationRunner(LoopPart):
    """Runs one iteration of the run in ``state`` and records it. Raises Park (a pause:
    the iteration row stays open, nothing is committed) and RunAbort."""

    def __init__(self, parts: LoopParts) -> None:
        super().__init__(parts)
        self.steps = StepRunner(parts)
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
            self.steps.ahead.discard()  # a status nobody took (a park, an abort)
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
        setup_error = self._setup()
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
        node_md = self._node_md()
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
        over = self.budget.before_step(first=index == 0,
                                       finish_pending=self.steering.finish_requested)
        if over is not None:
            return self._over_budget(plans[index:], over)
        if parked_gate:
            result = self.steps.resume_gate(plan, node_md)
        else:
            if index == len(plans) - 1 and self.steering.finish_requested \
                    and not self._drain(node_md):
                self._backstop("stopped", "Stopped while draining children.")
                return IterationResult(True, "Stopped by request", stopped=True)
            if waits_for_children(plan.frontmatter.fields):
                waited = self.steps.wait_children(plan, node_md)
                if waited is not None and waited.outcome.status is not Status.COMPLETED:
                    return self._after_wait(plans, index, waited)
            gate = is_gate(plan)  # a `check:` step runs its command, no agent
            dispatch = is_dispatch(plan)  # a pool's dispatcher: no agent either
            if self.boot.sync and not gate and not dispatch:
                sync = self.steps.run_sync(plan, node_md)
                if sync.stopped:  # its usage-window wait ended the run
                    return self._after_step(plans, index, sync)
                if sync.outcome.status is Status.EXITED:  # a timed-out SYNC is fatal
                    return self._fail(plans[index:], "SYNC", sync)
            if dispatch:
                result = PoolDispatch(self.parts).run(plan)
            elif gate:
                result = run_gate(self.boot, self.state, self.ledger, self.reporter,
                                  self.clock, plan, FixerRunner(self.steps, node_md))
            else:  # the last step's end starts the backstop's status (StatusAhead)
                self.steps.ahead.arm(index == len(plans) - 1)
                try:
                    result = self.steps.run_step(plan, node_md)
                finally:
                    self.steps.ahead.arm(False)
        if self.state.pool_end is not None:  # the pool ended: its REVIEW does not run
            self.steps.book_not_run(plans[index + 1:], "pool ended")
            self._backstop("auto", "")
            return IterationResult(True, self.state.pool_end)
        return self._after_step(plans, index, result)

    def _after_step(self, plans: list[StepPlan], index: int,
                    result: StepResult) -> IterationResult | None:
        """How the iteration ends after ``plans[index]`` ended as ``result`` (None: go on):
        a usage window that ends the run, a finish or stop taken by its approval wait, a
        spent budget, a failure."""
        name = plans[index].file.name
        ended = self.state.usage_end  # `on_usage_limit: stop`, past `max_usage_wait`
        if result.stopped and ended is not None:
            self._backstop("stopped", f"{name}: {ended.reason}.")
            return IterationResult(True, ended.reason, stopped=True)
        if result.finished:
            self._backstop("finished", f"Finish requested while {name} awaited approval.")
            return IterationResult(True, "Finished by request", finished=True)
        if result.stopped:
            self._backstop("stopped", f"Stopped while {name} awaited approval.")
            return IterationResult(True, "Stopped by request", stopped=True)
        if result.outcome.reason == OVER_BUDGET:
            return self._over_budget(plans[index + 1:], self.budget.spent_out())
        if result.outcome.status is not Status.COMPLETED:
            return self._fail(plans[index + 1:], name, result)
        return None

    def _after_wait(self, plans: list[StepPlan], index: int,
                    result: StepResult) -> IterationResult:
        """How the iteration ends when the wait before ``plans[index]`` did not release:
        a stop or finish winds it down, a timeout fails it (the step never ran)."""
        name = plans[index].file.name
        if result.finished:
            self._backstop("finished", f"Finish requested while waiting for children "
                           f"before {name}.")
            return IterationResult(True, "Finished by request", finished=True)
        if result.stopped:
            self._backstop("stopped", f"Stopped while waiting for children before {name}.")
            return IterationResult(True, "Stopped by request", stopped=True)
        return self._fail(plans[index:], WAIT_STEP, result)

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
                             sync=(lambda: self.steps.run_wait_sync(None, node_md))
                             if self.boot.sync else None)
        if end is WaitEnd.PAUSED:
            raise Park("while draining children")
        return end is not WaitEnd.STOPPED

    def _over_budget(self, not_run: list[StepPlan], reason: str) -> IterationResult:
        """The spend reached the ceiling mid-iteration: queue no more steps (each is booked
        ``stopped``/``over budget``), commit, and let the run wind down at the boundary."""
        self.steps.book_not_run(not_run, OVER_BUDGET, EXIT_BUDGET_SKIP)
        self._backstop(OVER_BUDGET, reason)
        return IterationResult(True, reason, budget=True)

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
        self.steps.book_not_run(not_run, f"failed on {name}")
        body = f"{name}: {outcome.status.value} (exit {outcome.exit_code}) {outcome.reason}".strip()
        if not_run:
            body += "\n\nSteps not run: " + ", ".join(p.file.name for p in not_run)
        self._backstop(label, body)
        return IterationResult(False, reason)

    def _setup(self) -> str | None:
        paths = self.boot.paths
        script = paths.setup_script
        if not script.exists():
            return None
        self.reporter.banner_open("Setup (scripts/setup.sh)")
        started = self.clock.monotonic()
        env = dict(self.boot.launch_env)
        env.update({"NODE_DIR": str(paths.node_dir), "WORKTREE_DIR": str(paths.worktree),
                    "NODE_BRANCH": paths.branch, "_NODE": str(paths.node_dir)})
        if script.is_file() and script.stat().st_size == 0:  # bash would do nothing, exit 0
            paths.setup_log.write_bytes(b"")
            code = 0
        else:
            self.reporter.release()  # the script's output streams live
            code = commands.run_teed(sandboxing.confine(["bash", str(script)], paths.worktree),
                                      cwd=paths.worktree, env=env,
                                      log_path=paths.setup_log, echo=self.reporter.raw_output)
        took = self.clock.monotonic() - started
        if code == 0:
            self.reporter.banner_close("Setup", "done", took)
            return None
        tail = _tail(paths.setup_log)
        self.reporter.banner_close("Setup", f"failed (exit {code})", took)
        return clip_reason(f"setup failed: {tail}" if tail else f"setup failed (exit {code})")

    def _node_md(self) -> str:
        try:
            if not self.boot.paths.node_md.is_file():  # a FIFO would block forever
                raise OSError("not a regular file")
            return self.boot.paths.node_md.read_text(encoding="utf-8", errors="replace")
        except OSError:
            self.reporter.warning(f"{self.boot.paths.node_md} is missing; prompts carry no task")
            return ""

    def _backstop(self, label: str, body: str) -> str | None:
        """Commit what is left; returns the failure (recorded as an event), or None."""
        state, paths = self.state, self.boot.paths
        subject = f"{paths.branch}: iteration {state.run_id}.{state.iteration} ({label})"
        sha, problem = backstop(paths.worktree, subject, body, self.reporter,
                                branch=paths.branch, pending=self.steps.ahead.take())
        self.steps.ahead.backstop_found(sha is not None or problem is not None)
        if problem is not None:
            self.ledger.add_event(paths.branch, "commit", actor="loop", status="failed",
                                  metadata=clip_reason(problem), run_id=state.run_id,
                                  iter_id=state.iter_id)
        return problem


def backstop(worktree: Path, subject: str, body: str, reporter: Reporter, *,
             branch: str | None = None,
             pending: PendingStatus | None = None) -> tuple[str | None, str | None]:
    """Commit whatever the agent left on the node branch (the backstop commit).

    Returns (sha or None, problem or None); a failure is shown and returned, never raised.
    A worktree holding a conflict is not committed: the problem is then exactly
    ``unresolved merge conflict in <paths>`` (the reason the iteration fails with).
    ``pending``: the worktree's status started ahead (``StatusAhead.take``), or None.
    """
    try:
        sha = backstop_commit(worktree, subject=subject, body=body, branch=branch,
                              pending=pending)
    except UnresolvedConflict as exc:
        problem = clip_reason(exc.reason)
        reporter.warning(f"nothing committed: {exc}")
        log.error("%s", problem)
        return None, problem
    except FractalError as exc:
        problem = clip_reason(f"backstop commit failed: {exc}")
        reporter.warning(problem)
        log.error("%s", problem)
        return None, problem
    if sha:
        reporter.notice(f"backstop commit {sha[:10]}: {subject}")
    return sha, None


def _tail(path: Path, lines: int = 3) -> str:
    try:
        data = path.read_bytes()[-4096:]
    except OSError:
        return ""
    text = [ln for ln in data.decode("utf-8", errors="replace").splitlines() if ln.strip()]
    return " | ".join(text[-lines:])
