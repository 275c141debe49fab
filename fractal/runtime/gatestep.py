"""Gate steps: a step file whose frontmatter has ``check: <command>`` runs that command
instead of an agent, books a step row like any other, and is never retried.

The result joins the prompts of the later steps of the iteration and of the next
iteration (the CHECK_* variables). ``on_fail: continue`` (the default) lets the
iteration go on after a red gate; ``on_fail: stop-iteration`` fails the iteration there
(the remaining steps are booked ``stopped``, ``failed on <NAME>``).
"""

from __future__ import annotations

from fractal.domain.checks import CheckKind, OnFail, gate_command, gate_on_fail
from fractal.domain.durations import parse_duration
from fractal.domain.errors import FractalError
from fractal.domain.outcome import EXIT_TIMEOUT, Status, StepOutcome
from fractal.domain.steps import banner_label
from fractal.domain.walls import effective_step_limit
from fractal.runtime.checks import CheckRequest, outcome_text, run_check
from fractal.runtime.clock import Clock
from fractal.runtime.context import Boot, RunState
from fractal.runtime.pane import Reporter
from fractal.runtime.steprunner import StepPlan, StepResult
from fractal.store.ledger import Ledger

__all__ = ["is_gate", "run_gate"]


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


def run_gate(boot: Boot, state: RunState, ledger: Ledger, reporter: Reporter, clock: Clock,
             plan: StepPlan) -> StepResult:
    """Run the gate ``plan`` and book its step row (cost 0.0): ``completed``/0 when the
    command passed, else ``failed``/N with reason ``check failed (exit N)``.

    Returns a completed StepResult when the iteration may go on (a pass, or ``on_fail:
    continue``), the failed outcome for ``on_fail: stop-iteration``, and a timed-out one
    (exit 124, nothing run) when the walls left no time.
    """
    fields = dict(plan.frontmatter.fields)
    command = gate_command(fields)
    assert command is not None, "run_gate called on an agent step"
    try:
        on_fail = gate_on_fail(fields)
    except FractalError as exc:
        reporter.warning(str(exc))
        on_fail = OnFail.CONTINUE
    banner = banner_label(plan.file)
    reporter.banner_open(f"{banner}: check {command}")
    node, position = boot.paths.branch, plan.file.position
    limit = _limit(state, fields, reporter, clock)
    if limit is not None and limit <= 0:
        ledger.book_closed_step(node=node, run_id=state.run_id, iter_id=state.iter_id,
                                step=position, step_name=plan.file.name,
                                status=Status.EXITED.value, exit_code=EXIT_TIMEOUT,
                                reason="timed out", cost=0.0)
        reporter.banner_close(banner, f"timed out (exit {EXIT_TIMEOUT}, limit 0s)", 0.0)
        return StepResult(StepOutcome(Status.EXITED, EXIT_TIMEOUT, "timed out"), limit, False)
    step_id = ledger.open_step(node=node, run_id=state.run_id, iter_id=state.iter_id,
                               step=position, step_name=plan.file.name, agent=None, model=None,
                               session=None)
    log_path = boot.paths.tmp_dir / "checks" / f"{state.run_id}-{state.iteration}-{position}.log"
    result = run_check(boot, state, reporter,
                       CheckRequest(CheckKind.GATE, command, limit, log_path, step_id), clock)
    state.checks = state.checks.after_gate(result)
    if result.passed:
        outcome = StepOutcome(Status.COMPLETED, 0, "")
    else:
        outcome = StepOutcome(Status.FAILED, result.exit_code,
                              f"check failed (exit {result.exit_code})")
    ledger.close_step(step_id, outcome.status.value, outcome.exit_code, outcome.reason,
                      cost=0.0)
    reporter.banner_close(banner, outcome_text(result), result.seconds)
    if result.passed or on_fail is OnFail.CONTINUE:
        return StepResult(StepOutcome(Status.COMPLETED, 0, ""), limit, True)
    return StepResult(outcome, limit, True)
