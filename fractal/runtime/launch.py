"""One launch attempt: book the step row, spawn the agent's process group, stream its
output into events, enforce the step's time limit, and record how it ended.

Seed: "Time limits" (SIGTERM to the whole group, a 10 s grace, SIGKILL to every
survivor), "What gets recorded" (a row per attempt; cost flushed as reported),
"Observing progress" (``<agent>.err``, ``tmp/err/`` snapshots). Ref §4.3 gives the
attribution order, implemented by ``domain.outcome.classify_launch``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from fractal.agents.base import Backend, LaunchRequest, ResultEvent, Usage
from fractal.domain.agent_errors import agent_error_text
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
from fractal.errors import SpawnError
from fractal.runtime import processes
from fractal.runtime.agentstream import Collector, StreamPump
from fractal.runtime.pane import Reporter
from fractal.runtime.waker import Waker
from fractal.store.ledger import Ledger

log = logging.getLogger(__name__)

FINAL_EVENT_GRACE = 5.0  # seconds an agent may linger after its final event
SOFT_INTERRUPT_GRACE = 3.0  # seconds to flush a final event after a soft interrupt
TRACE_ENV = "FRACTAL_TRACE"  # names a file: append timing points to it (make bench)


def trace(point: str, step_id: int, at_ns: int | None = None) -> None:
    """Append ``<point> <monotonic ns> <step_id>`` to the file named by ``$FRACTAL_TRACE``.

    A benchmark hook (``scripts/bench.py``, docs/benchmarks.md). Points: ``open`` (just
    before the step row is booked; ``at_ns`` carries that earlier time), ``spawn`` (the
    agent's process exists), ``exit`` (the waiter saw it exit), ``closed`` (the row is
    closed). Unset, it costs one environment lookup. Never raises: an unwritable trace
    file is skipped.
    """
    path = os.environ.get(TRACE_ENV)
    if not path:
        return
    ns = time.monotonic_ns() if at_ns is None else at_ns
    with contextlib.suppress(OSError), open(path, "a", encoding="ascii") as fh:
        fh.write(f"{point} {ns} {step_id}\n")


def kill_grace() -> float:
    """Seconds between SIGTERM and SIGKILL for a step (``processes.grace``)."""
    return processes.grace(processes.Reap.STEP)


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
    gated: bool = False
    #: Asked on every wake while the agent runs; True aborts it as a pause (seed: pause).
    should_pause: Callable[[], bool] | None = None
    #: Leave a successful row open (an approval gate closes it after the wait).
    hold_open: bool = False
    #: A waiting SYNC: a failure is recorded ``completed``, named in the metadata.
    lenient: bool = False


@dataclass(frozen=True)
class AttemptResult:
    """How an attempt ended. ``cost`` None means unknown; ``seconds`` is wall time;
    ``usage`` is this attempt's own token usage (None: unreported)."""

    step_id: int
    outcome: StepOutcome
    session: str | None
    cost: float | None
    model: str | None
    seconds: float
    launched: bool
    usage: Usage | None = None


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


def run_attempt(attempt: Attempt, *, ledger: Ledger, reporter: Reporter, waker: Waker,
                env_for: EnvBuilder) -> AttemptResult:
    """Run ``attempt`` to its end and close its step row.

    ``env_for(step_id)`` returns the full environment for the agent. Never raises for
    agent misbehaviour: every end (no spawn, failed spawn, crash, timeout, hang after
    the final event) is a recorded StepOutcome. Process groups are always reaped.
    """
    started = time.monotonic()
    opened_ns = time.monotonic_ns()
    backend = attempt.backend
    request = attempt.request
    step_id = ledger.open_step(
        node=attempt.node, run_id=attempt.run_id, iter_id=attempt.iter_id, step=attempt.step,
        step_name=attempt.step_name, agent=backend.name, model=request.model,
        session=request.resume or request.new_session, gated=attempt.gated)
    trace("open", step_id, opened_ns)

    def finish(outcome: StepOutcome, collector: Collector | None, launched: bool) -> AttemptResult:
        if attempt.lenient and outcome.status in (Status.FAILED, Status.EXITED):
            outcome = StepOutcome(Status.COMPLETED, outcome.exit_code,
                                  f"sync failed (exit {outcome.exit_code})")
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
            ledger.park_step(step_id, attempt.node, outcome.exit_code, reason)
        elif not (attempt.hold_open and outcome.status is Status.COMPLETED):
            ledger.close_step(step_id, outcome.status.value, outcome.exit_code, reason,
                              cost=0.0 if not launched and cost is None else None)
        trace("closed", step_id)
        if outcome.status in (Status.FAILED, Status.EXITED) and launched:
            _snapshot(attempt.err_path, attempt.err_snapshot)
        if collector is not None and collector.retries:
            reporter.notice(f"the agent retried its API call {collector.retries} time(s)")
        return AttemptResult(step_id, outcome, collector.session if collector else None,
                             cost, collector.model if collector else None,
                             time.monotonic() - started, launched,
                             collector.usage if collector else None)

    if attempt.limit is not None and attempt.limit <= 0:
        return finish(StepOutcome(Status.EXITED, EXIT_TIMEOUT, "timed out"), None, False)

    invocation = backend.invocation(request)
    env = env_for(step_id)
    _overlay(env, invocation.env)
    _overlay(env, backend.env(request, env))  # reserved keys last (ref §4.13)
    marker = launch_marker(str(ledger.db_path), step_id)
    try:
        attempt.err_path.parent.mkdir(parents=True, exist_ok=True)
        launched = processes.spawn_group(
            invocation.argv, cwd=request.worktree, env=env, stdin_data=invocation.stdin,
            stderr_path=attempt.err_path, marker=marker)
        trace("spawn", step_id)
    except (SpawnError, OSError, ValueError) as exc:
        _snapshot(attempt.err_path, attempt.err_snapshot)
        return finish(StepOutcome(Status.FAILED, EXIT_CANNOT_EXEC,
                                  clip_reason(f"agent could not start: {exc}")), None, False)

    handle = launched.handle
    try:
        ledger.set_step_process(step_id, handle.pgid, handle.create_time)
    except Exception as exc:
        log.warning("could not record the process group of step %s: %s", step_id, exc)
    collector = Collector(ledger, reporter, step_id)
    assert launched.popen.stdout is not None
    pump = StreamPump(launched.popen.stdout, backend.parser(request), collector)
    pump.start()
    exited = threading.Event()

    def _wait_exit() -> None:
        launched.popen.wait()
        trace("exit", step_id)
        exited.set()
        waker.wake()

    threading.Thread(target=_wait_exit, daemon=True, name="fractal-wait").start()
    try:
        timed_out, lingered, paused = _supervise(attempt, launched, collector, exited, waker,
                                                 started)
    except BaseException:
        # The supervisor is being torn down (a signal, a bug): never leave the group behind.
        processes.kill_group(handle, grace=kill_grace())
        raise
    exited.wait(2.0)  # the group is gone; let the waiter collect the exit status
    _drain(pump, marker, step_id)
    if paused:  # ref §4.4: a pause that races the deadline is still a pause
        code = launched.popen.returncode
        outcome = StepOutcome(Status.PAUSED, 0 if code is None else exit_code_from_returncode(code),
                              "")
    else:
        outcome = judge_launch(backend, collector.result, launched.popen.returncode,
                               timed_out=timed_out, lingered=lingered,
                               stream_error=pump.stream_error,
                               stderr_tail=_stderr_tail(attempt.err_path))
    return finish(outcome, collector, True)


def unpriced_reason(reason: str) -> str:
    """Append ``; unpriced`` (seed: an abnormally ended step with a session and no
    recorded cost), keeping the whole reason within the 250-character cap."""
    suffix = "; unpriced"
    return clip_reason(reason, 250 - len(suffix)) + suffix if reason else suffix.lstrip("; ")


def judge_launch(backend: Backend, result: ResultEvent | None, returncode: int | None, *,
                 timed_out: bool, lingered: bool, stream_error: str | None,
                 stderr_tail: str) -> StepOutcome:
    """How a launch that ran is recorded (ref §4.3 step 10, plus issue 3's failure modes).

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


def _supervise(attempt: Attempt, launched: processes.Launched, collector: Collector,
               exited: threading.Event, waker: Waker,
               started: float) -> tuple[bool, bool, bool]:
    """Wait for the agent to exit, enforcing the step limit, the final-event grace and a
    pause.

    Returns (timed_out, lingered, paused): lingered means we ended a group that had
    already printed its final event, so the step is recorded by that event; paused that
    a pause aborted it (only its group is ended; seed: pause).
    """
    handle = launched.handle
    deadline = None if attempt.limit is None else started + attempt.limit
    grace = kill_grace()
    while not exited.is_set():
        if attempt.should_pause is not None and attempt.should_pause():
            collector.reporter.notice("pause requested: ending the agent's process group")
            processes.kill_group(handle, grace=grace, soft_signal=attempt.backend.soft_interrupt,
                                 soft_grace=SOFT_INTERRUPT_GRACE)
            return False, False, True
        now = time.monotonic()
        if deadline is not None and now >= deadline:
            processes.kill_group(handle, grace=grace, soft_signal=attempt.backend.soft_interrupt,
                                 soft_grace=SOFT_INTERRUPT_GRACE)
            return True, False, False
        if collector.result_at is not None and now - collector.result_at >= FINAL_EVENT_GRACE:
            collector.reporter.notice(
                "agent printed its final event but did not exit; ending its group")
            processes.kill_group(handle, grace=grace)
            return False, True, False
        waits = [t for t in (None if deadline is None else deadline - now,
                             None if collector.result_at is None
                             else collector.result_at + FINAL_EVENT_GRACE - now) if t is not None]
        waker.wait(min(waits) if waits else None)
    return False, False, False


def _drain(pump: StreamPump, marker: str, step_id: int) -> None:
    """Let the stream pump finish, then reap every process that carries the launch marker."""
    grace = kill_grace()
    pump.join(2.0)
    if pump.is_alive():  # an escaped descendant holds stdout open
        processes.sweep_marker(marker, grace=grace)
        pump.join(5.0)
    survivors = processes.sweep_marker(marker, grace=grace)
    # An escapee that dropped the marker (`env -i`) is still our descendant: the
    # supervisor is a subreaper and starts nothing else while no step runs.
    survivors += processes.sweep_descendants(grace=grace)
    if survivors:
        log.error("processes survived the sweep of step %s: %s", step_id, survivors)
