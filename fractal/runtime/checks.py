"""Run one check command (an exit check or a gate step) the way the loop runs everything:
a process group from the worktree root, under a time limit, teed to a log and the pane,
then summarised and booked as a ``checks`` row.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from fractal.domain.checks import CheckKind, CheckResult, output_tail
from fractal.domain.outcome import EXIT_CANNOT_EXEC, EXIT_TIMEOUT, clip_reason
from fractal.domain.render import iter_ref
from fractal.domain.signature import CheckSummary, summarise
from fractal.errors import FractalError, SpawnError
from fractal.runtime import commands
from fractal.runtime.clock import Clock
from fractal.runtime.context import Boot, RunState
from fractal.runtime.launch import kill_grace
from fractal.runtime.pane import Reporter
from fractal.store.checkbook import CheckBook
from fractal.store.timefmt import utc_now

log = logging.getLogger(__name__)

__all__ = ["CheckRequest", "check_env", "outcome_text", "read_log", "run_check"]

_HOST_ONLY = ("TMUX", "TMUX_PANE")  # the supervisor's own host, never a child's
_HEAD, _TAIL = 1 << 20, 3 << 20  # bytes of a huge log read for the summary (start, end)


@dataclass(frozen=True)
class CheckRequest:
    """One check to run: ``command`` (a ``bash -c`` string) for ``kind``, at most ``limit``
    seconds (None: no limit), logged to ``log_path``; ``step_id`` names a gate's step row."""

    kind: CheckKind
    command: str
    limit: float | None
    log_path: Path
    step_id: int | None = None


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
    try:
        code = commands.run_teed(["bash", "-c", request.command], cwd=paths.worktree,
                                 env=check_env(boot, state, request.kind),
                                 log_path=request.log_path, echo=reporter.raw_output,
                                 grace=kill_grace(), timeout=request.limit)
    except SpawnError as exc:
        request.log_path.write_text(f"{exc}\n", encoding="utf-8")
        code = EXIT_CANNOT_EXEC
    seconds = clock.monotonic() - started
    output = read_log(request.log_path)
    limit = request.limit
    timed_out = code == EXIT_TIMEOUT and limit is not None and seconds >= limit
    summary = (CheckSummary(f"timed out after {round(limit or 0)}s", None, None) if timed_out
               else summarise(output, code))
    result = CheckResult(kind=request.kind, command=request.command, exit_code=code,
                         seconds=seconds, tail=output_tail(output),
                         output_file=str(request.log_path), summary=summary,
                         iteration=state.iteration, timed_out=timed_out)
    try:
        CheckBook(paths.tree.db_path).book_check(
            node=paths.branch, run_id=state.run_id, iter_id=state.iter_id,
            step_id=request.step_id, kind=request.kind.value, command=request.command,
            exit_code=code, signature=summary.signature, failures=summary.failures,
            passed=summary.passed, output_path=str(request.log_path), started_at=started_at)
    except FractalError as exc:
        log.error("could not record the check: %s", exc)
        reporter.warning(clip_reason(f"could not record the check: {exc}"))
    return result


def outcome_text(result: CheckResult) -> str:
    """The pane's closing text for a check: ``passed``, or ``failed (exit N): <signature>``
    with the failure count when known."""
    if result.passed:
        return "passed"
    count = result.summary.failures
    counted = f", {count} failing" if count is not None else ""
    return clip_reason(f"failed (exit {result.exit_code}{counted}): {result.summary.signature}")
