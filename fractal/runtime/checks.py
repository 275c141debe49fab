"""Check commands in the loop: the runner, the exit check after each iteration, and gate
steps.

``run_check`` runs one command the way the loop runs everything: a process group from the
worktree root, under a time limit, teed to a log and the pane, then summarised and booked
as a ``checks`` row. ``run_exit_check`` runs the node's ``exit_check`` once per finished
iteration, after its backstop commit: green ends the run ``completed``; red is remembered
(its output feeds the next prompts as the CHECK_* variables) and advances the no-progress
streak, which may end the run ``exited``. ``run_gate`` runs a step file whose frontmatter
has ``check: <command>`` instead of an agent: it books a step row like any other and is
never retried; ``on_fail: continue`` (the default) lets the iteration go on after a red
gate, ``on_fail: stop-iteration`` fails the iteration there, and ``on_fail: fix`` runs
the gate's fixer prompt and the check again, a bounded number of rounds, before the
gate's ``on_fail_final`` decides. Gates run in file order, so the first gate that stays
red with stop-iteration ends the iteration.

Scores: a check whose last output line reports a score is held to ``pass_score`` (the
node's, or a gate's own frontmatter): below it the check is red even at exit 0. The
scored exit checks feed the run's stagnation track (``min_gain``, ``stagnation``), which
may end the run ``exited`` (``runtime.scoring`` holds the rest of the score side).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Protocol

from fractal.domain.checks import (
    CheckKind,
    CheckResult,
    FixPlan,
    OnFail,
    gate_command,
    gate_fix_plan,
    gate_on_fail,
    gate_pass_score,
    output_tail,
)
from fractal.domain.durations import parse_duration
from fractal.domain.outcome import EXIT_CANNOT_EXEC, EXIT_TIMEOUT, Status, StepOutcome, clip_reason
from fractal.domain.render import iter_ref
from fractal.domain.scores import parse_score, score_passes, score_signature
from fractal.domain.signature import CheckSummary, summarise
from fractal.domain.steps import banner_label
from fractal.domain.walls import effective_step_limit
from fractal.errors import FractalError, SpawnError
from fractal.procs import commands, processes
from fractal.runtime.clock import Clock
from fractal.runtime.context import Boot, RunState
from fractal.runtime.pane import Reporter
from fractal.runtime.sandboxing import confine
from fractal.runtime.scoring import head_of, score_rules
from fractal.runtime.steprunner import OVER_BUDGET, StepPlan, StepResult
from fractal.store.checkbook import CheckBook
from fractal.store.ledger import Ledger
from fractal.store.timefmt import utc_now

log = logging.getLogger(__name__)

__all__ = ["CheckRequest", "CheckVerdict", "GateCheck", "GateFixer", "check_env", "check_gate",
           "fix_cycle", "is_gate", "outcome_text", "read_log", "run_check", "run_exit_check",
           "run_gate"]

_HOST_ONLY = ("TMUX", "TMUX_PANE")  # the supervisor's own host, never a child's
_HEAD, _TAIL = 1 << 20, 3 << 20  # bytes of a huge log read for the summary (start, end)


@dataclass(frozen=True)
class CheckRequest:
    """One check to run: ``command`` (a ``bash -c`` string) for ``kind``, at most ``limit``
    seconds (None: no limit), logged to ``log_path``; ``step_id`` names a gate's step row;
    ``needed`` is the score it must report to pass (None: the exit code decides)."""

    kind: CheckKind
    command: str
    limit: float | None
    log_path: Path
    step_id: int | None = None
    needed: float | None = None


def check_env(boot: Boot, state: RunState, kind: CheckKind) -> dict[str, str]:
    """The environment of a check: the launch environment plus where and when it runs
    (NODE_DIR, WORKTREE_DIR, NODE_BRANCH, RUN_ID, ITER, ITER_REF, CHECK_KIND)."""
    paths = boot.paths
    env = dict(boot.launch_env or os.environ)
    for name in _HOST_ONLY:
        env.pop(name, None)
    env.update({"NODE_DIR": str(paths.node_dir), "WORKTREE_DIR": str(paths.worktree),
                "NODE_BRANCH": paths.branch, "RUN_ID": str(state.run_id),
                "ITER": str(state.iteration), "ITER_REF": iter_ref(state.run_id, state.iteration),
                "CHECK_KIND": kind.value})
    return env


def read_log(path: Path) -> str:
    """The text of a check log (UTF-8, bad bytes replaced); a log over 4 MiB keeps its
    first 1 MiB and last 3 MiB, which hold the first error and the tools' summaries."""
    try:
        with path.open("rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            fh.seek(0)
            if size <= _HEAD + _TAIL:
                data = fh.read()
            else:
                head = fh.read(_HEAD)
                fh.seek(size - _TAIL)
                data = head + b"\n[...]\n" + fh.read()
    except OSError:
        return ""
    return data.decode("utf-8", errors="replace")


def run_check(boot: Boot, state: RunState, reporter: Reporter, request: CheckRequest,
              clock: Clock) -> CheckResult:
    """Run ``request`` to completion, book its ``checks`` row, and return the result.

    Output goes to ``request.log_path`` and the pane. A check that reaches its limit is
    stopped like an agent (TERM, the kill grace, KILL) and recorded with exit 124 and the
    signature ``timed out after <N>s``; a shell that cannot start is exit 127. A failure
    to book the row is logged and shown, never raised: the run goes on.
    """
    paths = boot.paths
    request.log_path.parent.mkdir(parents=True, exist_ok=True)
    started_at, started = utc_now(), clock.monotonic()
    reporter.release()  # the check's output streams live
    try:
        code = commands.run_teed(confine(["bash", "-c", request.command], paths.worktree),
                                 cwd=paths.worktree, env=check_env(boot, state, request.kind),
                                 log_path=request.log_path, echo=reporter.raw_output,
                                 grace=processes.grace(processes.Reap.STEP),
                                 timeout=request.limit)
    except SpawnError as exc:
        request.log_path.write_text(f"{exc}\n", encoding="utf-8")
        code = EXIT_CANNOT_EXEC
    seconds = clock.monotonic() - started
    output = read_log(request.log_path)
    limit = request.limit
    timed_out = code == EXIT_TIMEOUT and limit is not None and seconds >= limit
    summary = (CheckSummary(f"timed out after {round(limit or 0)}s", None, None) if timed_out
               else summarise(output, code))
    score = None if timed_out else parse_score(output)
    needed = request.needed
    if code == 0 and needed is not None and not score_passes(score, code, needed):
        summary = CheckSummary(score_signature(score, needed), summary.failures, summary.passed)
    result = CheckResult(kind=request.kind, command=request.command, exit_code=code,
                         seconds=seconds, tail=output_tail(output),
                         output_file=str(request.log_path), summary=summary,
                         iteration=state.iteration, timed_out=timed_out, score=score,
                         needed=needed, head=head_of(paths.worktree) if score is not None else None)
    try:
        CheckBook(paths.tree.db_path).book_check(
            node=paths.branch, run_id=state.run_id, iter_id=state.iter_id,
            step_id=request.step_id, kind=request.kind.value, command=request.command,
            exit_code=code, signature=summary.signature, failures=summary.failures,
            passed=summary.passed, output_path=str(request.log_path), started_at=started_at,
            score=score)
    except FractalError as exc:
        log.error("could not record the check: %s", exc)
        reporter.warning(clip_reason(f"could not record the check: {exc}"))
    return result


def outcome_text(result: CheckResult) -> str:
    """The pane's closing text for a check: ``passed`` (with its score), or ``failed (exit
    N): <signature>`` with the failure count when known."""
    if result.passed:
        return "passed" if result.score is None else f"passed (score {result.score:g})"
    count = result.summary.failures
    counted = f", {count} failing" if count is not None else ""
    return clip_reason(f"failed (exit {result.exit_code}{counted}): {result.summary.signature}")


# -- the exit check ----------------------------------------------------------------------

class CheckVerdict(StrEnum):
    """What the exit check says about the run after an iteration."""

    NONE = "none"  # no exit check configured, or it did not run
    PASSED = "passed"  # green: the run ends completed
    FAILED = "failed"  # red: the run goes on, the output feeds the next iteration
    STALLED = "stalled"  # red the same way no_progress times in a row, or a stalled score


def run_exit_check(boot: Boot, state: RunState, reporter: Reporter, clock: Clock, *,
                   steps_ran: bool) -> CheckVerdict:
    """Run the live ``exit_check`` for the iteration that just ended and fold it into
    ``state.checks``.

    Skipped (NONE) when the node has no exit check, when no step ran (``steps_ran`` False:
    a failed setup or a broken step-file set changed nothing to check), or when the run
    wall leaves no time. Its limit is ``check_timeout``, bounded by the run wall; the log
    is ``<node_dir>/tmp/checks/<run>-<iter>.log``.
    """
    command = state.live.exit_check
    if command is None:
        return CheckVerdict.NONE
    if not steps_ran:
        reporter.notice("exit check skipped: no step ran in this iteration")
        return CheckVerdict.NONE
    limit = effective_step_limit(clock.monotonic(), state.run_deadline, None,
                                 state.live.check_timeout)
    if limit is not None and limit <= 0:
        reporter.notice("exit check skipped: the run wall has been reached")
        return CheckVerdict.NONE
    log_path = boot.paths.tmp_dir / "checks" / f"{state.run_id}-{state.iteration}.log"
    reporter.banner_open(f"Exit check ({command})")
    rules = score_rules(state)
    result = run_check(boot, state, reporter,
                       CheckRequest(CheckKind.EXIT, command, limit, log_path,
                                    needed=rules.pass_score), clock)
    state.checks = state.checks.after_exit_check(result, state.live.no_progress, rules)
    reporter.banner_close("Exit check", outcome_text(result), result.seconds)
    if result.passed:
        return CheckVerdict.PASSED
    streak = state.checks.streak
    if state.checks.stalled is not None and streak is not None:
        reporter.notice(f"no progress: the exit check failed the same way {streak.count} "
                        "times in a row")
        return CheckVerdict.STALLED
    if state.checks.stagnant is not None:
        reporter.notice(f"{state.checks.stagnant} (the score rose by less than "
                        f"{rules.min_gain:g} {rules.stagnation} times in a row)")
        return CheckVerdict.STALLED
    return CheckVerdict.FAILED


# -- gate steps --------------------------------------------------------------------------

def is_gate(plan: StepPlan) -> bool:
    """True when ``plan`` is a gate step (its frontmatter has a non-empty ``check:``)."""
    return gate_command(plan.frontmatter.fields) is not None


def _limit(state: RunState, fields: dict[str, str], reporter: Reporter,
           clock: Clock) -> float | None:
    """The gate's limit: its ``timeout:`` frontmatter, else ``check_timeout``, bounded by the
    run and iteration walls (a malformed ``timeout:`` warns and falls back)."""
    seconds: int | None = state.live.check_timeout
    if "timeout" in fields:
        try:
            seconds = parse_duration(fields["timeout"], "timeout")
        except FractalError as exc:
            reporter.warning(f"{exc}; using check_timeout instead")
    return effective_step_limit(clock.monotonic(), state.run_deadline, state.iter_deadline,
                                seconds)


class GateFixer(Protocol):
    """What a gate's check-and-fix cycle needs from the loop (``runtime.fixers``)."""

    def launch(self, gate: StepPlan, fixer: str, round_no: int, rounds: int) -> StepResult | None:
        """Run fix round ``round_no`` of ``rounds``: the prompt file ``fixer`` (relative to
        the node directory) as one agent launch with its own step row; None when the
        prompt cannot be read (warned; the cycle ends there)."""

    def between_rounds(self) -> StepResult | None:
        """A pending stop or a spent budget that ends the cycle before the next round
        (raises Park on a pause); None: go on."""


@dataclass(frozen=True)
class GateCheck:
    """One run of a gate's command: its ``result`` (None when the walls left no time),
    the ``outcome`` its step row closed with, and the ``limit`` it ran under (s)."""

    result: CheckResult | None
    outcome: StepOutcome
    limit: float | None


def check_gate(boot: Boot, state: RunState, ledger: Ledger, reporter: Reporter, clock: Clock,
               plan: StepPlan, *, after: str = "", log_suffix: str = "") -> GateCheck:
    """Run the gate command of ``plan`` once and book its step row (cost 0.0):
    ``completed``/0 when it passed, else ``failed``/N ``check failed (exit N)``; ``after``
    (``fix round 2 of 3``) joins the reason of a re-check, ``log_suffix`` its log name. A
    check that exited 0 below its ``pass_score`` is ``failed``/1 ``check failed (score 0.6
    below pass_score 0.8)``. The result becomes the run's newest check. Walls with no time
    left: ``exited``/124."""
    fields = dict(plan.frontmatter.fields)
    command = gate_command(fields)
    assert command is not None, "check_gate called on an agent step"
    try:
        needed = gate_pass_score(fields, None)
    except FractalError as exc:
        reporter.warning(f"{exc}; the exit code alone decides")
        needed = None
    banner = banner_label(plan.file)
    reporter.banner_open(f"{banner}: check {command}" + (f" (after {after})" if after else ""))
    node, position = boot.paths.branch, plan.file.position
    limit = _limit(state, fields, reporter, clock)
    if limit is not None and limit <= 0:
        return GateCheck(None, _no_time(node, state, ledger, reporter, plan, banner), limit)
    step_id = ledger.open_step(node=node, run_id=state.run_id, iter_id=state.iter_id,
                               step=position, step_name=plan.file.name, agent=None, model=None,
                               session=None)
    log_path = (boot.paths.tmp_dir / "checks"
                / f"{state.run_id}-{state.iteration}-{position}{log_suffix}.log")
    result = run_check(boot, state, reporter,
                       CheckRequest(CheckKind.GATE, command, limit, log_path, step_id,
                                    needed), clock)
    state.checks = state.checks.after_gate(result)
    tail = f" after {after}" if after else ""
    if result.passed:
        outcome = StepOutcome(Status.COMPLETED, 0, f"passed{tail}" if after else "")
    elif result.exit_code == 0:  # exit 0 below its pass_score: a failure at exit 1
        outcome = StepOutcome(Status.FAILED, 1, f"check failed ({result.summary.signature}){tail}")
    else:
        outcome = StepOutcome(Status.FAILED, result.exit_code,
                              f"check failed (exit {result.exit_code}){tail}")
    ledger.close_step(step_id, outcome.status.value, outcome.exit_code, outcome.reason,
                      cost=0.0)
    reporter.banner_close(banner, outcome_text(result), result.seconds)
    return GateCheck(result, outcome, limit)


def run_gate(boot: Boot, state: RunState, ledger: Ledger, reporter: Reporter, clock: Clock,
             plan: StepPlan, fixer: GateFixer | None = None) -> StepResult:
    """Run the gate ``plan`` (``check_gate``) and say whether the iteration goes on.

    Returns a completed StepResult when it may (a pass, or ``on_fail: continue``), the
    failed outcome for ``on_fail: stop-iteration``, and a timed-out one (exit 124, nothing
    run) when the walls left no time. ``on_fail: fix`` runs the check-and-fix cycle
    (``fix_cycle``) with ``fixer``.
    """
    fields = dict(plan.frontmatter.fields)
    try:
        on_fail = gate_on_fail(fields)
    except FractalError as exc:
        reporter.warning(str(exc))
        on_fail = OnFail.CONTINUE
    fix: FixPlan | None = None
    if on_fail is OnFail.FIX:
        try:
            fix = gate_fix_plan(fields)
        except FractalError as exc:
            reporter.warning(f"{exc}; the gate stops the iteration when it fails")
        on_fail = OnFail.STOP_ITERATION if fix is None else fix.final
    first = check_gate(boot, state, ledger, reporter, clock, plan)
    if first.result is None:
        return StepResult(first.outcome, first.limit, False)
    last, rounds = first, 0
    if not first.result.passed and fix is not None and fixer is not None:
        ended, last, rounds = fix_cycle(boot, state, ledger, reporter, clock, plan, fix,
                                        fixer, first)
        if ended is not None:
            return ended
    if last.result is None:
        return StepResult(last.outcome, last.limit, False)
    if last.result.passed or on_fail is OnFail.CONTINUE:
        return StepResult(StepOutcome(Status.COMPLETED, 0, ""), last.limit, True)
    if rounds:
        reason = (f"{last.outcome.reason.split(' after ')[0]} after {rounds} fix "
                  f"round{'s' if rounds > 1 else ''}")
        return StepResult(StepOutcome(Status.FAILED, last.outcome.exit_code, reason),
                          last.limit, True)
    return StepResult(last.outcome, last.limit, True)


def fix_cycle(boot: Boot, state: RunState, ledger: Ledger, reporter: Reporter, clock: Clock,
              plan: StepPlan, fix: FixPlan, fixer: GateFixer,
              first: GateCheck) -> tuple[StepResult | None, GateCheck, int]:
    """Fixer, re-check, at most ``fix.rounds`` times after the red ``first`` check, until
    the gate passes. Returns (the StepResult that ends the step early: a fixer over
    budget, a stop between rounds; else None), the newest GateCheck (a re-check with no
    time left has no result) and the number of re-checks that ran."""
    last = first
    for round_no in range(1, fix.rounds + 1):
        label = f"fix round {round_no} of {fix.rounds}"
        if round_no > 1:
            ended = fixer.between_rounds()
            if ended is not None:
                return ended, last, round_no - 1
        reporter.notice(f"{plan.file.name} failed: {label} ({fix.fixer})")
        fixed = fixer.launch(plan, fix.fixer, round_no, fix.rounds)
        if fixed is None:
            return None, last, round_no - 1
        if fixed.outcome.reason == OVER_BUDGET:
            return fixed, last, round_no - 1
        last = check_gate(boot, state, ledger, reporter, clock, plan, after=label,
                          log_suffix=f"-fix{round_no}")
        if last.result is None or last.result.passed:
            return None, last, round_no
    return None, last, fix.rounds


def _no_time(node: str, state: RunState, ledger: Ledger, reporter: Reporter, plan: StepPlan,
             banner: str) -> StepOutcome:
    """The walls left a gate no time: book it ``exited``/124 ``timed out`` (cost 0.0),
    nothing run."""
    ledger.book_closed_step(node=node, run_id=state.run_id,
                            iter_id=state.iter_id, step=plan.file.position,
                            step_name=plan.file.name, status=Status.EXITED.value,
                            exit_code=EXIT_TIMEOUT, reason="timed out", cost=0.0)
    reporter.banner_close(banner, f"timed out (exit {EXIT_TIMEOUT}, limit 0s)", 0.0)
    return StepOutcome(Status.EXITED, EXIT_TIMEOUT, "timed out")
