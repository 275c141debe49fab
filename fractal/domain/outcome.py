"""Exit-code sentinels, reason clipping, and the two outcome decisions.

``classify_launch`` names what one agent launch ended as; ``decide_run_end`` is the
terminal matrix that closes a run. Both are pure: facts in, a frozen value out. The
status vocabulary lives in ``fractal.domain.states`` (re-exported here as ``Status``,
``SETTLED`` and ``UNSETTLED``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from fractal.domain.reasons import (
    ABNORMAL_EXIT,
    AWAITING_APPROVAL,
    EXIT_BUDGET_SKIP,
    EXIT_CANNOT_EXEC,
    EXIT_TIMEOUT,
    REASON_LIMIT,
    clip_reason,
    done_reason,
    exit_code_from_returncode,
    retry_reason,
    signal_exit_code,
    without_retry,
)
from fractal.domain.states import SETTLED, UNSETTLED, Status
from fractal.domain.stopcause import StopCause, first_cause

__all__ = [
    "ABNORMAL_EXIT",
    "AWAITING_APPROVAL",
    "EXIT_BUDGET_SKIP",
    "EXIT_CANNOT_EXEC",
    "EXIT_TIMEOUT",
    "REASON_LIMIT",
    "SETTLED",
    "UNSETTLED",
    "RunEnd",
    "RunFacts",
    "Status",
    "StepOutcome",
    "classify_launch",
    "clip_reason",
    "decide_run_end",
    "exit_code_from_returncode",
    "retry_reason",
    "signal_exit_code",
    "without_retry",
]


@dataclass(frozen=True)
class StepOutcome:
    """How one launch is recorded: row ``status``, ``exit_code`` and metadata ``reason``."""

    status: Status
    exit_code: int
    reason: str


def classify_launch(*, returncode: int | None, timed_out: bool, paused: bool,
                    budget_stopped: bool, stream_error: str | None, agent_error: str | None,
                    stderr_tail: str) -> StepOutcome:
    """Attribute a finished launch: the step row's status, exit code and reason.

    ``returncode`` is ``Popen.returncode`` (negative for a signal death) or None when no
    exit status exists (the process could not be started: recorded as 127). First match:

    1. non-zero exit and ``budget_stopped`` (the agent stopped at its budget flag): completed/0;
    2. non-zero exit and ``paused``: paused with the exit code;
    3. ``timed_out`` (even with exit 0): exited/124/``timed out``;
    4. ``stream_error``: failed/``stream error: <msg>``;
    5. ``agent_error``: failed/``agent error: <msg>``;
    6. non-zero exit: failed/N/``agent error (exit N): <stderr_tail>`` (N = 128+signal);
    7. otherwise completed/0/``""``.

    Failures keep the process's exit code, or 1 when the process itself exited 0. Reasons
    go through ``clip_reason``.
    """
    code = EXIT_CANNOT_EXEC if returncode is None else exit_code_from_returncode(returncode)
    if code != 0 and budget_stopped:
        return StepOutcome(Status.COMPLETED, 0, "")
    if code != 0 and paused:
        return StepOutcome(Status.PAUSED, code, "")
    if timed_out:
        return StepOutcome(Status.EXITED, EXIT_TIMEOUT, "timed out")
    failed_code = code or 1
    if stream_error is not None:
        return StepOutcome(Status.FAILED, failed_code, clip_reason(f"stream error: {stream_error}"))
    if agent_error is not None:
        return StepOutcome(Status.FAILED, failed_code, clip_reason(f"agent error: {agent_error}"))
    if code != 0:
        tail = clip_reason(stderr_tail)
        reason = f"agent error (exit {code}): {tail}" if tail else f"agent error (exit {code})"
        return StepOutcome(Status.FAILED, code, clip_reason(reason))
    return StepOutcome(Status.COMPLETED, 0, "")


@dataclass(frozen=True)
class RunFacts:
    """What the supervisor knows when a run ends (inputs of ``decide_run_end``).

    ``last_iter`` is the last iteration number that ran (0 if none); ``budget_reason`` the
    budget landing's reason (None when no budget bound tripped); ``setup_aborted`` and
    ``setup_failures`` the setup crash-loop; ``finish_drained`` a finish signal whose subtree
    drained; ``timed_out`` the run wall; ``walls_label`` the ``TIME_BUDGET`` label;
    ``stopped`` a stop signal; ``last_iter_ok`` whether the last iteration succeeded;
    ``crash_reason`` names what ended an otherwise unexplained run (e.g. step discovery
    failing three times in a row), replacing the generic ``Exited at iteration R.I``.
    ``exit_check_passed`` is the exit-check command that passed, ``no_progress`` the
    signature that stalled the run, ``stagnation`` the ``stagnation: ...`` reason of a
    stalled score; None when they did not happen. ``score_note`` is the distance of the
    newest red scored check to its threshold (``score 0.72 of 0.8 needed``; None when
    there is none or it is stale), added to a budget or iteration-cap end.
    ``step_end`` is the end a step kind gave the run (a worker pool's ``completed``
    ``pool: 8 done, 1 failed``: every item settled and reviewed; a usage window's
    ``on_usage_limit: stop`` or ``max_usage_wait``): it names the run's end unless a
    budget bound landed or a stop signal ended the run. ``done`` is the reason the node's
    own agent gave when it ended its run (``fractal node done``; ``""`` without one),
    None when it did not.
    """

    run_id: int
    last_iter: int
    max_iters: int | None
    budget_reason: str | None
    setup_aborted: bool
    setup_failures: int
    finish_drained: bool
    timed_out: bool
    walls_label: str
    stopped: bool
    last_iter_ok: bool
    crash_reason: str | None = None
    exit_check_passed: str | None = None
    no_progress: str | None = None
    stagnation: str | None = None
    score_note: str | None = None
    step_end: RunEnd | None = None
    done: str | None = None


@dataclass(frozen=True)
class RunEnd:
    """How a run closes: the node's status, the run row's status, exit code and reason."""

    node_status: Status
    run_status: Status
    exit_code: int
    reason: str


def _end(status: Status, exit_code: int, reason: str) -> RunEnd:
    return RunEnd(status, status, exit_code, clip_reason(reason))


def decide_run_end(facts: RunFacts) -> RunEnd:
    """The terminal matrix that closes a run, first match wins.

    A step kind's end of the run (``step_end``) wins first, unless a budget bound landed
    or a stop signal ended the run; then:
    budget -> exited/0 (the budget reason); setup abort -> exited/1 ``setup failed x<N>``;
    finish drained -> completed/0 ``Finished by request``; the node's own ``done`` ->
    completed/0 ``Done`` or ``Done: <its reason>``; run timeout -> exited/1
    ``Timed out at iteration R.I (<walls>)``; stop -> stopped/0 ``Stopped by request``;
    ``max_iters`` reached with the last iteration OK -> completed/0
    ``Reached max iterations (N)``, or failed -> exited/1 ``...; final iteration failed``;
    otherwise exited/1 ``Exited at iteration R.I``. Node and run statuses are equal.

    The conditions that hold are first ranked by ``stopcause`` precedence: when the
    winner is a passed exit check -> completed/0 ``exit check passed (<command>)``; when
    it is no progress (no stop or finish outranks it) -> exited/1 ``no progress:
    <signature>``; stagnation -> exited/1 ``stagnation: score <a> -> <b>``; otherwise the
    matrix above decides, and when its winner is the budget or the iteration cap a
    ``score_note`` is appended (``; score 0.72 of 0.8 needed``).
    """
    if facts.step_end is not None and facts.budget_reason is None and not facts.stopped:
        return facts.step_end
    cause = first_cause(_causes(facts))
    if cause is StopCause.EXIT_CHECK:
        return _end(Status.COMPLETED, 0, f"exit check passed ({facts.exit_check_passed})")
    if cause is StopCause.NO_PROGRESS:
        return _end(Status.EXITED, 1, f"no progress: {facts.no_progress}")
    if cause is StopCause.STAGNATION:
        return _end(Status.EXITED, 1, str(facts.stagnation))
    end = _matrix(facts)
    if facts.score_note is not None and cause in (StopCause.BUDGET, StopCause.MAX_ITERS):
        return replace(end, reason=clip_reason(f"{end.reason}; {facts.score_note}"))
    return end


def _matrix(facts: RunFacts) -> RunEnd:
    """The terminal matrix of ``decide_run_end`` below the ranked causes."""
    ref = f"{facts.run_id}.{facts.last_iter}"
    if facts.budget_reason is not None:
        return _end(Status.EXITED, 0, facts.budget_reason)
    if facts.setup_aborted:
        return _end(Status.EXITED, 1, f"setup failed x{facts.setup_failures}")
    if facts.finish_drained:
        return _end(Status.COMPLETED, 0, "Finished by request")
    if facts.done is not None:
        return _end(Status.COMPLETED, 0, done_reason(facts.done))
    if facts.timed_out:
        return _end(Status.EXITED, 1, f"Timed out at iteration {ref} ({facts.walls_label})")
    if facts.stopped:
        return _end(Status.STOPPED, 0, "Stopped by request")
    if facts.max_iters is not None and facts.last_iter >= facts.max_iters:
        if facts.last_iter_ok:
            return _end(Status.COMPLETED, 0, f"Reached max iterations ({facts.max_iters})")
        return _end(Status.EXITED, 1,
                    f"Reached max iterations ({facts.max_iters}); final iteration failed")
    return _end(Status.EXITED, 1, facts.crash_reason or f"Exited at iteration {ref}")


def _causes(facts: RunFacts) -> set[StopCause]:
    """The ``StopCause`` conditions that hold in ``facts``."""
    holding = {
        StopCause.EXIT_CHECK: facts.exit_check_passed is not None,
        StopCause.SIGNAL: facts.stopped or facts.finish_drained or facts.done is not None,
        StopCause.NO_PROGRESS: facts.no_progress is not None,
        StopCause.STAGNATION: facts.stagnation is not None,
        StopCause.BUDGET: facts.budget_reason is not None,
        StopCause.TIME: facts.timed_out,
        StopCause.MAX_ITERS: facts.max_iters is not None and facts.last_iter >= facts.max_iters,
    }
    return {cause for cause, holds in holding.items() if holds}
