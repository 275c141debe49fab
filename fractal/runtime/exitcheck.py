"""The node's exit check after each iteration, and the no-progress stop.

The loop calls ``run_exit_check`` once per finished iteration, after its backstop
commit. A green check ends the run ``completed``; a red one is remembered (its output
feeds the next iteration's prompts as the CHECK_* variables) and advances the
no-progress streak, which may end the run ``exited``.
"""

from __future__ import annotations

from enum import StrEnum

from fractal.domain.checks import CheckKind
from fractal.domain.walls import effective_step_limit
from fractal.runtime.checks import CheckRequest, outcome_text, run_check
from fractal.runtime.clock import Clock
from fractal.runtime.context import Boot, RunState
from fractal.runtime.pane import Reporter

__all__ = ["CheckVerdict", "run_exit_check"]


class CheckVerdict(StrEnum):
    """What the exit check says about the run after an iteration."""

    NONE = "none"  # no exit check configured, or it did not run
    PASSED = "passed"  # green: the run ends completed
    FAILED = "failed"  # red: the run goes on, the output feeds the next iteration
    STALLED = "stalled"  # red the same way no_progress times in a row: the run ends


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
    result = run_check(boot, state, reporter,
                       CheckRequest(CheckKind.EXIT, command, limit, log_path), clock)
    state.checks = state.checks.after_exit_check(result, state.live.no_progress)
    reporter.banner_close("Exit check", outcome_text(result), result.seconds)
    if result.passed:
        return CheckVerdict.PASSED
    streak = state.checks.streak
    if state.checks.stalled is not None and streak is not None:
        reporter.notice(f"no progress: the exit check failed the same way {streak.count} "
                        "times in a row")
        return CheckVerdict.STALLED
    return CheckVerdict.FAILED
