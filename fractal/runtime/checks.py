"""Check commands in the loop: the runner and the exit check after each iteration (a gate
step's check is the ``kinds.checkgate`` step kind's, run through the same runner).

``CheckRunner.run`` runs one command the way the loop runs everything: a process group from the
worktree root, under a time limit, teed to a log and the pane, then summarised and booked
as a ``checks`` row. ``CheckRunner.exit_check`` runs the node's ``exit_check`` once per finished
iteration, after its backstop commit: green ends the run ``completed``; red is remembered
(its output feeds the next prompts as the CHECK_* variables) and advances the no-progress
streak, which may end the run ``exited``.

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

from fractal.domain.checks.rules import CheckKind, CheckResult, output_tail
from fractal.domain.checks.scores import parse_score, score_passes, score_signature
from fractal.domain.checks.signature import CheckSummary, summarise
from fractal.domain.prompt.render import iter_ref
from fractal.domain.run.outcome import EXIT_CANNOT_EXEC, EXIT_TIMEOUT, clip_reason
from fractal.domain.run.walls import effective_step_limit
from fractal.errors import FractalError, SpawnError
from fractal.procs import commands, processes
from fractal.runtime.context import Boot, RunState
from fractal.runtime.loopparts import LoopPart
from fractal.runtime.sandboxing import after_launch, confine, launch_env
from fractal.runtime.scoring import head_of, score_rules
from fractal.store.checkbook import CheckBook
from fractal.store.timefmt import utc_now

log = logging.getLogger(__name__)

__all__ = ["CheckRequest", "CheckRunner", "CheckVerdict", "check_env", "outcome_text",
           "read_log"]

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


class CheckRunner(LoopPart):
    """Runs the run's check commands: a gate's, and the exit check after an iteration."""

    def run(self, request: CheckRequest) -> CheckResult:
        """Run ``request`` to completion, book its ``checks`` row, and return the result.

        Output goes to ``request.log_path`` and the pane. A check that reaches its limit is
        stopped like an agent (TERM, the kill grace, KILL) and recorded with exit 124 and the
        signature ``timed out after <N>s``; a shell that cannot start is exit 127. A failure
        to book the row is logged and shown, never raised: the run goes on.
        """
        boot, state, reporter, clock = self.boot, self.state, self.reporter, self.clock
        paths = boot.paths
        request.log_path.parent.mkdir(parents=True, exist_ok=True)
        started_at, started = utc_now(), clock.monotonic()
        reporter.release()  # the check's output streams live
        try:
            code = commands.run_teed(confine(["bash", "-c", request.command],
                                             paths.worktree), cwd=paths.worktree,
                                     env=launch_env(check_env(boot, state, request.kind)),
                                     log_path=request.log_path, echo=reporter.raw_output,
                                     grace=processes.grace(processes.Reap.STEP),
                                     timeout=request.limit)
        except SpawnError as exc:
            request.log_path.write_text(f"{exc}\n", encoding="utf-8")
            code = EXIT_CANNOT_EXEC
        finally:
            after_launch()
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

    def exit_check(self, *, steps_ran: bool) -> CheckVerdict:
        """Run the live ``exit_check`` for the iteration that just ended and fold it into
        ``state.checks``.

        Skipped (NONE) when the node has no exit check, when no step ran (``steps_ran``
        False: a failed setup or a broken step-file set changed nothing to check), or when
        the run wall leaves no time. Its limit is ``check_timeout``, bounded by the run
        wall; the log is ``<node_dir>/tmp/checks/<run>-<iter>.log``.
        """
        state, reporter = self.state, self.reporter
        command = state.live.exit_check
        if command is None:
            return CheckVerdict.NONE
        if not steps_ran:
            reporter.notice("exit check skipped: no step ran in this iteration")
            return CheckVerdict.NONE
        limit = effective_step_limit(self.clock.monotonic(), state.run_deadline, None,
                                     state.live.check_timeout)
        if limit is not None and limit <= 0:
            reporter.notice("exit check skipped: the run wall has been reached")
            return CheckVerdict.NONE
        log_path = self.boot.paths.tmp_dir / "checks" / f"{state.run_id}-{state.iteration}.log"
        reporter.banner_open(f"Exit check ({command})")
        rules = score_rules(state)
        result = self.run(CheckRequest(CheckKind.EXIT, command, limit, log_path,
                                       needed=rules.pass_score))
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
