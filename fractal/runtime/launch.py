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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from fractal.agents.base import (
    AgentEvent,
    Backend,
    CostEvent,
    LaunchRequest,
    ModelEvent,
    NoticeEvent,
    ResultEvent,
    SessionEvent,
    StreamParser,
)
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
from fractal.runtime.pane import Reporter
from fractal.runtime.waker import Waker
from fractal.store.ledger import Ledger

log = logging.getLogger(__name__)

MAX_LINE_BYTES = 8 * 1024 * 1024  # one stdout line longer than this is skipped, not buffered
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
    """Seconds between SIGTERM and SIGKILL (seed: 10 s); ``FRACTAL_KILL_GRACE`` overrides."""
    try:
        return max(0.1, float(os.environ.get("FRACTAL_KILL_GRACE", "10")))
    except ValueError:
        return 10.0


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


@dataclass(frozen=True)
class AttemptResult:
    """How an attempt ended. ``cost`` None means unknown; ``seconds`` is wall time."""

    step_id: int
    outcome: StepOutcome
    session: str | None
    cost: float | None
    model: str | None
    seconds: float
    launched: bool


EnvBuilder = Callable[[int], dict[str, str]]


class _Pump(threading.Thread):
    """Reads stdout line by line (bounded), parses, and hands events to ``sink``."""

    def __init__(self, stream: IO[bytes], parser: StreamParser,
                 sink: Callable[[AgentEvent], None]) -> None:
        super().__init__(daemon=True, name="fractal-stream")
        self.stream = stream
        self.parser = parser
        self.sink = sink
        self.stream_error: str | None = None

    def _emit(self, events: list[AgentEvent]) -> None:
        for event in events:
            self.sink(event)

    def _parse(self, line: str) -> None:
        if self.stream_error is not None:
            return
        try:
            self._emit(self.parser.feed(line))
        except Exception as exc:  # a parser bug must not kill the pump
            self.stream_error = f"{type(exc).__name__}: {exc}"
            log.exception("stream parser failed")

    def run(self) -> None:
        skipping = 0
        try:
            while True:
                chunk = self.stream.readline(MAX_LINE_BYTES)
                if not chunk:
                    break
                if skipping or (len(chunk) >= MAX_LINE_BYTES and not chunk.endswith(b"\n")):
                    skipping += len(chunk)
                    if chunk.endswith(b"\n"):
                        self._emit([NoticeEvent(f"skipped an over-long output line ({skipping} bytes)")])
                        skipping = 0
                    continue
                self._parse(chunk.rstrip(b"\r\n").decode("utf-8", errors="replace"))
            if self.stream_error is None:
                self._emit(self.parser.finish())
        except (OSError, ValueError) as exc:
            self.stream_error = self.stream_error or f"{type(exc).__name__}: {exc}"


class _Collector:
    """Applies events from the pump: pane, and live flushes to the step row."""

    def __init__(self, ledger: Ledger, reporter: Reporter, step_id: int) -> None:
        self.ledger = ledger
        self.reporter = reporter
        self.step_id = step_id
        self.session: str | None = None
        self.cost: float | None = None
        self.model: str | None = None
        self.result: ResultEvent | None = None
        self.result_at: float | None = None

    def __call__(self, event: AgentEvent) -> None:
        self.reporter.agent_event(event)
        try:
            if isinstance(event, CostEvent):
                self.cost = event.usd
                self.ledger.set_step_cost(self.step_id, event.usd)
            elif isinstance(event, SessionEvent) and event.session != self.session:
                self.session = event.session
                self.ledger.set_step_session(self.step_id, event.session)
            elif isinstance(event, ModelEvent) and event.model != self.model:
                self.model = event.model
                self.ledger.set_step_model(self.step_id, event.model)
            elif isinstance(event, ResultEvent):
                self.result = event
                self.result_at = time.monotonic()
        except Exception as exc:  # a contended write must not lose the stream
            log.warning("could not record %s on step %s: %s", type(event).__name__, self.step_id, exc)


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

    def finish(outcome: StepOutcome, collector: _Collector | None, launched: bool) -> AttemptResult:
        reason = retry_reason(outcome.reason) if attempt.retry else outcome.reason
        outcome = StepOutcome(outcome.status, outcome.exit_code, reason)
        cost = collector.cost if collector else None
        ledger.close_step(step_id, outcome.status.value, outcome.exit_code, reason,
                          cost=0.0 if not launched and cost is None else None)
        trace("closed", step_id)
        if outcome.status in (Status.FAILED, Status.EXITED) and launched:
            _snapshot(attempt.err_path, attempt.err_snapshot)
        return AttemptResult(step_id, outcome, collector.session if collector else None,
                             cost, collector.model if collector else None,
                             time.monotonic() - started, launched)

    if attempt.limit is not None and attempt.limit <= 0:
        return finish(StepOutcome(Status.EXITED, EXIT_TIMEOUT, "timed out"), None, False)

    invocation = backend.invocation(request)
    env = env_for(step_id)
    for key, value in invocation.env.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    marker = launch_marker(str(ledger.db_path), step_id)
    try:
        launched = processes.spawn_group(
            invocation.argv, cwd=request.worktree, env=env, stdin_data=invocation.stdin,
            stderr_path=attempt.err_path, marker=marker)
        trace("spawn", step_id)
    except SpawnError as exc:
        _snapshot(attempt.err_path, attempt.err_snapshot)
        return finish(StepOutcome(Status.FAILED, EXIT_CANNOT_EXEC,
                                  clip_reason(f"agent could not start: {exc}")), None, False)

    handle = launched.handle
    try:
        ledger.set_step_process(step_id, handle.pgid, handle.create_time)
    except Exception as exc:
        log.warning("could not record the process group of step %s: %s", step_id, exc)
    collector = _Collector(ledger, reporter, step_id)
    assert launched.popen.stdout is not None
    pump = _Pump(launched.popen.stdout, backend.parser(), collector)
    pump.start()
    exited = threading.Event()

    def _wait_exit() -> None:
        launched.popen.wait()
        trace("exit", step_id)
        exited.set()
        waker.wake()

    threading.Thread(target=_wait_exit, daemon=True, name="fractal-wait").start()
    try:
        timed_out, lingered = _supervise(attempt, launched, collector, exited, waker, started)
    except BaseException:
        # The supervisor is being torn down (a signal, a bug): never leave the group behind.
        processes.kill_group(handle, grace=kill_grace())
        raise
    _drain(pump, marker, step_id)
    returncode = launched.popen.returncode
    result = collector.result
    outcome = classify_launch(
        returncode=0 if lingered and result is not None and result.ok else (
            exit_code_from_returncode(returncode) if returncode is not None else None),
        timed_out=timed_out,
        paused=False,
        budget_stopped=bool(result and result.budget_stopped),
        stream_error=pump.stream_error,
        agent_error=(result.error or "the agent reported an error") if result and not result.ok
        else None,
        stderr_tail=_stderr_tail(attempt.err_path),
    )
    return finish(outcome, collector, True)


def _supervise(attempt: Attempt, launched: processes.Launched, collector: _Collector,
               exited: threading.Event, waker: Waker, started: float) -> tuple[bool, bool]:
    """Wait for the agent to exit, enforcing the step limit and the final-event grace.

    Returns (timed_out, lingered): lingered means we ended a group that had already
    printed its final event, so the step is recorded by that event.
    """
    handle = launched.handle
    deadline = None if attempt.limit is None else started + attempt.limit
    grace = kill_grace()
    while not exited.is_set():
        now = time.monotonic()
        if deadline is not None and now >= deadline:
            processes.kill_group(handle, grace=grace, soft_signal=attempt.backend.soft_interrupt,
                                 soft_grace=SOFT_INTERRUPT_GRACE)
            return True, False
        if collector.result_at is not None and now - collector.result_at >= FINAL_EVENT_GRACE:
            collector.reporter.notice(
                "agent printed its final event but did not exit; ending its group")
            processes.kill_group(handle, grace=grace)
            return False, True
        waits = [t for t in (None if deadline is None else deadline - now,
                             None if collector.result_at is None
                             else collector.result_at + FINAL_EVENT_GRACE - now) if t is not None]
        waker.wait(min(waits) if waits else None)
    return False, False


def _drain(pump: _Pump, marker: str, step_id: int) -> None:
    """Let the stream pump finish, then reap every process that carries the launch marker."""
    grace = kill_grace()
    pump.join(2.0)
    if pump.is_alive():  # an escaped descendant holds stdout open
        processes.sweep_marker(marker, grace=grace)
        pump.join(5.0)
    survivors = processes.sweep_marker(marker, grace=grace)
    if survivors:
        log.error("processes survived the sweep of step %s: %s", step_id, survivors)
