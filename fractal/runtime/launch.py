"""One launch attempt: book the step row, start the agent, stream its output into the
row, enforce the step's time limit, and record how it ended.

The attempt runs in phases: ``_open_row`` books the row; ``_start`` asks the launcher for
the agent (or ends the attempt unstarted: no time left, a spawn failure); ``_supervise``
waits for the end (the agent exits; the limit passes: TERM to the whole group, the kill
grace, KILL to every survivor; the agent lingers after its final event; a pause ends its
group); ``_judge`` turns that ``Ending`` into a ``StepOutcome`` (``domain.outcome
.classify_launch`` gives the attribution order); ``_close_row`` records it under the
attempt's ``RowPolicy``. Each attempt has its own row; the cost is flushed as reported;
stderr goes to ``<agent>.err`` and, for a failed attempt, a snapshot in ``tmp/err/``.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from fractal.agents.base import Backend, LaunchRequest, ResultEvent, Usage, WindowEvent
from fractal.domain.agent_errors import USAGE_LIMIT, agent_error_text
from fractal.domain.markers import launch_marker
from fractal.domain.outcome import (
    EXIT_CANNOT_EXEC,
    EXIT_TIMEOUT,
    Status,
    StepOutcome,
    classify_launch,
    clip_reason,
    exit_code_from_returncode,
    retry_reason,
)
from fractal.domain.reasons import unpriced_reason
from fractal.domain.usage import UsageLimit, limit_reason
from fractal.errors import SpawnError
from fractal.procs import processes
from fractal.runtime import heap
from fractal.runtime.agentstream import Collector
from fractal.runtime.clock import Clock, trace, trace_now
from fractal.runtime.launcher import AgentRun, Launcher, Spawn
from fractal.runtime.pane import Reporter
from fractal.runtime.parking import announce_parking
from fractal.runtime.statusahead import StatusAhead
from fractal.runtime.waker import Waker
from fractal.store.ledger import Ledger

log = logging.getLogger(__name__)

FINAL_EVENT_GRACE = 5.0  # seconds an agent may linger after its final event
SOFT_INTERRUPT_GRACE = 3.0  # seconds to flush a final event after a soft interrupt


def kill_grace() -> float:
    """Seconds between SIGTERM and SIGKILL for a step (``processes.grace``)."""
    return processes.grace(processes.Reap.STEP)


class RowPolicy(StrEnum):
    """How an attempt's step row is closed."""

    CLOSE = "close"  # closed with the outcome (the usual step)
    HOLD_OPEN = "hold open"  # a success stays open: an approval gate closes it after the wait
    LENIENT = "lenient"  # a waiting SYNC: a failure is recorded completed, named in the reason


class Ending(StrEnum):
    """How an attempt ended, before it is judged."""

    NO_TIME = "no time"  # the walls left no time: never started (exit 124)
    SPAWN_FAILED = "spawn failed"  # the program could not start (exit 127)
    EXITED = "exited"  # the agent exited by itself
    TIMED_OUT = "timed out"  # the step limit passed: the group was ended
    LINGERED = "lingered"  # it printed its final event but did not exit: the group was ended
    PAUSED = "paused"  # a pause ended the group (the row is parked, not closed)

    @property
    def started(self) -> bool:
        """True when an agent process ran."""
        return self not in (Ending.NO_TIME, Ending.SPAWN_FAILED)


@dataclass(frozen=True)
class Attempt:
    """One attempt to run a step. ``limit`` is seconds (None: no limit; <= 0: already past)."""

    node: str
    run_id: int
    iter_id: int | None
    step: int
    step_name: str
    backend: Backend
    request: LaunchRequest
    limit: float | None
    err_path: Path
    err_snapshot: Path
    retry: bool = False
    row: RowPolicy = RowPolicy.CLOSE
    #: Asked on every wake while the agent runs; True ends it as a pause.
    should_pause: Callable[[], bool] | None = None

    @property
    def gated(self) -> bool:
        """The row is an approval gate's (booked gated, held open on success)."""
        return self.row is RowPolicy.HOLD_OPEN


@dataclass(frozen=True)
class AttemptResult:
    """How an attempt ended. ``cost`` None means unknown; ``seconds`` is the time it took;
    ``usage`` is this attempt's own token usage (None: unreported)."""

    step_id: int
    outcome: StepOutcome
    session: str | None
    cost: float | None
    model: str | None
    seconds: float
    launched: bool
    usage: Usage | None = None
    #: The usage window the CLI reported closed: the row is ``paused`` (``usage limit
    #: (<window>) until <UTC>``), the step is not a failure and is re-entered at the reset.
    window: WindowEvent | None = None
    #: The last near-limit report of an open usage window (``utilization`` 0..1).
    warning: WindowEvent | None = None
    #: The agent's final report (None: none); a failed one names its API error class.
    report: ResultEvent | None = None


@dataclass(frozen=True)
class LaunchKit:
    """What every attempt of a run uses: the ledger, the pane, the waker and clock its
    waits block on, the launcher, and the backstop's status to start (never armed: none)."""

    ledger: Ledger
    reporter: Reporter
    waker: Waker
    clock: Clock
    launcher: Launcher
    ahead: StatusAhead = field(default_factory=StatusAhead)


EnvBuilder = Callable[[int], dict[str, str]]


def _stderr_tail(path: Path, limit: int = 2048) -> str:
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - limit))
            data = fh.read()
    except OSError:
        return ""
    lines = [ln for ln in data.decode("utf-8", errors="replace").splitlines() if ln.strip()]
    return " | ".join(lines[-3:])


def _snapshot(src: Path, dest: Path) -> None:
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        if src.exists():
            shutil.copyfile(src, dest)
        else:
            dest.write_bytes(b"")
    except OSError as exc:
        log.warning("could not save stderr snapshot %s: %s", dest, exc)


def run_attempt(attempt: Attempt, kit: LaunchKit, env_for: EnvBuilder) -> AttemptResult:
    """Run ``attempt`` to its end and close (or park, or hold open) its step row.

    ``env_for(step_id)`` returns the full environment for the agent. Never raises for agent
    misbehaviour: every end (no time, failed spawn, crash, timeout, hang after the final event,
    pause) is a recorded StepOutcome. The process group is always reaped, also when the
    supervisor is torn down mid-attempt (the exception then propagates).
    """
    started = kit.clock.monotonic()
    step_id = _open_row(attempt, kit.ledger)
    if attempt.limit is not None and attempt.limit <= 0:
        outcome = _judge(attempt, Ending.NO_TIME, None, None, None)
        return _close_row(attempt, kit, step_id, outcome, None, False, started)
    kit.ahead.agent_starting()  # a status started before this agent would be stale
    agent, failure = _start(attempt, kit, step_id, env_for)
    if agent is None:
        _snapshot(attempt.err_path, attempt.err_snapshot)
        outcome = StepOutcome(Status.FAILED, EXIT_CANNOT_EXEC,
                              clip_reason(f"agent could not start: {failure}"))
        return _close_row(attempt, kit, step_id, outcome, None, False, started)
    collector = Collector(kit.ledger, kit.reporter, step_id, kit.clock)
    agent.start(attempt.backend.parser(attempt.request), collector, kit.waker.wake)
    kit.reporter.release()  # what the boundary wrote (banners), in one write
    heap.at_launch()  # the iteration's heap step runs while the agent works
    try:
        ending = _supervise(attempt, agent, collector, kit, started)
    except BaseException as exc:  # torn down (a signal, a bug): never leave the group
        announce_parking(kit.ledger, kit.reporter, attempt.node, attempt.run_id, step_id, exc)
        agent.stop(grace=kill_grace())
        raise
    kit.reporter.hold()  # until the next agent starts, a wait, a command or the run's end
    stream_error = agent.settle()
    if attempt.row is RowPolicy.CLOSE and ending is not Ending.PAUSED:
        kit.ahead.agent_gone()  # its leftovers are swept: git runs while the row closes
    outcome = _judge(attempt, ending, agent.returncode(), collector, stream_error)
    return _close_row(attempt, kit, step_id, outcome, collector, True, started)


def _open_row(attempt: Attempt, ledger: Ledger) -> int:
    """Book the attempt's step row (running); returns its step_id."""
    opened_ns = trace_now()
    request = attempt.request
    step_id = ledger.open_step(
        node=attempt.node, run_id=attempt.run_id, iter_id=attempt.iter_id, step=attempt.step,
        step_name=attempt.step_name, agent=attempt.backend.name, model=request.model,
        session=request.resume or request.new_session, gated=attempt.gated)
    trace("open", step_id, opened_ns)
    return step_id


def _start(attempt: Attempt, kit: LaunchKit, step_id: int,
           env_for: EnvBuilder) -> tuple[AgentRun | None, str]:
    """Build the environment and start the agent: (the agent, "") or (None, why not)."""
    backend, request = attempt.backend, attempt.request
    invocation = backend.invocation(request)
    env = env_for(step_id)
    _overlay(env, invocation.env)
    _overlay(env, backend.env(request, env))  # the backend's reserved keys win
    spawn = Spawn(step_id=step_id, request=request, invocation=invocation, env=env,
                  err_path=attempt.err_path, marker=launch_marker(str(kit.ledger.db_path),
                                                                  step_id))
    try:
        agent = kit.launcher.spawn(spawn, grace=kill_grace())
    except (SpawnError, OSError, ValueError) as exc:
        return None, str(exc)
    try:
        kit.ledger.set_step_process(step_id, agent.pgid, agent.create_time)
    except Exception as exc:
        log.warning("could not record the process group of step %s: %s", step_id, exc)
    return agent, ""


def _supervise(attempt: Attempt, agent: AgentRun, collector: Collector, kit: LaunchKit,
               started: float) -> Ending:
    """Wait for the agent's end, enforcing the step limit, the final-event grace and a
    pause (a pause that races the deadline is still a pause: it is checked first)."""
    clock = kit.clock
    deadline = None if attempt.limit is None else started + attempt.limit
    grace = kill_grace()
    soft = attempt.backend.soft_interrupt
    while not agent.exited():
        if attempt.should_pause is not None and attempt.should_pause():
            kit.reporter.notice("pause requested: ending the agent's process group")
            agent.stop(grace=grace, soft_signal=soft, soft_grace=SOFT_INTERRUPT_GRACE)
            return Ending.PAUSED
        now = clock.monotonic()
        if deadline is not None and now >= deadline:
            agent.stop(grace=grace, soft_signal=soft, soft_grace=SOFT_INTERRUPT_GRACE)
            return Ending.TIMED_OUT
        if collector.result_at is not None and now - collector.result_at >= FINAL_EVENT_GRACE:
            kit.reporter.notice("agent printed its final event but did not exit; ending its "
                                "group")
            agent.stop(grace=grace)
            return Ending.LINGERED
        waits = [t for t in (None if deadline is None else deadline - now,
                             None if collector.result_at is None
                             else collector.result_at + FINAL_EVENT_GRACE - now) if t is not None]
        kit.waker.wait(min(waits) if waits else None)
    return Ending.EXITED


def _judge(attempt: Attempt, ending: Ending, returncode: int | None,
           collector: Collector | None, stream_error: str | None) -> StepOutcome:
    """The outcome of an attempt that ended as ``ending``."""
    if ending is Ending.NO_TIME:
        return StepOutcome(Status.EXITED, EXIT_TIMEOUT, "timed out")
    if ending is Ending.PAUSED:
        code = 0 if returncode is None else exit_code_from_returncode(returncode)
        return StepOutcome(Status.PAUSED, code, "")
    assert collector is not None
    return judge_launch(attempt.backend, collector.result, returncode,
                        timed_out=ending is Ending.TIMED_OUT,
                        lingered=ending is Ending.LINGERED, stream_error=stream_error,
                        stderr_tail=_stderr_tail(attempt.err_path))


def _close_row(attempt: Attempt, kit: LaunchKit, step_id: int, outcome: StepOutcome,
               collector: Collector | None, launched: bool, started: float) -> AttemptResult:
    """Record ``outcome`` on the row under the attempt's RowPolicy (a pause parks it) and
    return the AttemptResult. A failed attempt that talked to a model and recorded no
    cost gets ``; unpriced``; a retry gets ``; retry``."""
    if attempt.row is RowPolicy.LENIENT and outcome.status in (Status.FAILED, Status.EXITED):
        outcome = StepOutcome(Status.COMPLETED, outcome.exit_code,
                              f"sync failed (exit {outcome.exit_code})")
    window = _closed_window(collector)
    if window is not None:  # a usage-limit stop: not a failure, no retry spent
        return _usage_limited(kit, step_id, window, collector, launched, started)
    reason = retry_reason(outcome.reason) if attempt.retry else outcome.reason
    cost = collector.cost if collector else None
    if (outcome.status in (Status.FAILED, Status.EXITED) and collector is not None
            and collector.session and cost is None):
        reason = unpriced_reason(reason)  # it talked to a model; its spend is unknown
    outcome = StepOutcome(outcome.status, outcome.exit_code, reason)
    if collector is not None:
        try:
            collector.flush()  # the last figures, before the row closes
        except Exception as exc:
            log.warning("could not flush the cost of step %s: %s", step_id, exc)
    if outcome.status is Status.PAUSED:
        kit.ledger.park_step(step_id, attempt.node, outcome.exit_code, reason)
    elif not (attempt.row is RowPolicy.HOLD_OPEN and outcome.status is Status.COMPLETED):
        kit.ledger.close_step(step_id, outcome.status.value, outcome.exit_code, reason,
                              cost=0.0 if not launched and cost is None else None)
    trace("closed", step_id)
    if outcome.status in (Status.FAILED, Status.EXITED) and launched:
        _snapshot(attempt.err_path, attempt.err_snapshot)
    if collector is not None and collector.retries:
        kit.reporter.notice(f"the agent retried its API call {collector.retries} time(s)")
    return AttemptResult(step_id, outcome, collector.session if collector else None,
                         cost, collector.model if collector else None,
                         kit.clock.monotonic() - started, launched,
                         collector.usage if collector else None,
                         warning=collector.warning if collector else None,
                         report=collector.result if collector else None)


def _closed_window(collector: Collector | None) -> WindowEvent | None:
    """The closed usage window the attempt reported: its rejected window event, or a
    window of unstated reset when only its final event said ``usage_limit``."""
    if collector is None:
        return None
    if collector.window is not None:
        return collector.window
    result = collector.result
    if result is not None and not result.ok and result.error_kind == USAGE_LIMIT:
        return WindowEvent(rejected=True)
    return None


def _usage_limited(kit: LaunchKit, step_id: int, window: WindowEvent,
                   collector: Collector | None, launched: bool,
                   started: float) -> AttemptResult:
    """A usage-limited attempt: its row stays open with the reason ``usage limit
    (<window>) until <UTC>``, its spend kept; the usage-window wait closes it (``paused``
    when the step is re-entered, ``stopped`` when the run ends instead)."""
    reason = limit_reason(UsageLimit(window.window, window.resets_at))
    if collector is not None:
        try:
            collector.flush()
        except Exception as exc:
            log.warning("could not flush the cost of step %s: %s", step_id, exc)
    kit.ledger.note_step(step_id, reason)
    return AttemptResult(step_id, StepOutcome(Status.PAUSED, 0, reason),
                         collector.session if collector else None,
                         collector.cost if collector else None,
                         collector.model if collector else None,
                         kit.clock.monotonic() - started, launched,
                         collector.usage if collector else None, window=window)


def judge_launch(backend: Backend, result: ResultEvent | None, returncode: int | None, *,
                 timed_out: bool, lingered: bool, stream_error: str | None,
                 stderr_tail: str) -> StepOutcome:
    """How a launch that ran is recorded.

    ``returncode`` is ``Popen.returncode`` (None: unknown). A group we ended after its final
    event (``lingered``) counts as exit 0 when that event was a success. A backend that
    ``requires_result`` and printed none fails with ``stream ended without a result (exit
    N)`` (plus the stderr tail) unless the step timed out or the parser broke; a final
    event with ``ok`` False is an ``agent error`` naming its class, HTTP status and
    message. Everything else is ``domain.outcome.classify_launch``.
    """
    code = None if returncode is None else exit_code_from_returncode(returncode)
    if lingered and result is not None and result.ok:
        code = 0
    if backend.requires_result and result is None and not timed_out and stream_error is None:
        reason = f"stream ended without a result (exit {'?' if code is None else code})"
        tail = clip_reason(stderr_tail)
        return StepOutcome(Status.FAILED, code or 1,
                           clip_reason(f"{reason}: {tail}" if tail else reason))
    agent_error = (agent_error_text(result.error_kind, result.api_status, result.error)
                   if result is not None and not result.ok else None)
    return classify_launch(
        returncode=code, timed_out=timed_out, paused=False,
        budget_stopped=bool(result and result.budget_stopped), stream_error=stream_error,
        agent_error=agent_error, stderr_tail=stderr_tail)


def _overlay(env: dict[str, str], changes: Mapping[str, str | None]) -> None:
    """Apply ``changes`` to ``env``: a value of None removes the variable."""
    for key, value in changes.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
