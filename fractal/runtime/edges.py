"""What frames an iteration's steps: the node's ``scripts/setup.sh`` before them, and
the backstop commit of whatever the agent left after them (or after the step that ended
the iteration early). The supervisor's final and crash commits are backstops too.
"""

from __future__ import annotations

import logging
from pathlib import Path

from fractal.domain.run.outcome import clip_reason
from fractal.errors import FractalError
from fractal.procs import commands
from fractal.procs.processes import open_log
from fractal.runtime.loopparts import LoopParts
from fractal.runtime.pane import Reporter
from fractal.runtime.sandboxing import after_launch, confine, launch_env
from fractal.workspace.backstop import backstop_commit
from fractal.workspace.commit_types import UnresolvedConflict
from fractal.workspace.status_ahead import PendingStatus

__all__ = ["backstop", "run_setup"]

log = logging.getLogger(__name__)


def run_setup(parts: LoopParts) -> str | None:
    """Run ``scripts/setup.sh`` (when the node has one) from the worktree, its output
    teed to ``setup.log`` and the pane. Returns the iteration's failure reason
    (``setup failed: <last lines>``), or None when it passed or there is none."""
    paths = parts.boot.paths
    script = paths.setup_script
    if not script.exists():
        return None
    parts.reporter.banner_open("Setup (scripts/setup.sh)")
    started = parts.clock.monotonic()
    env = dict(parts.boot.launch_env)
    env.update({"NODE_DIR": str(paths.node_dir), "WORKTREE_DIR": str(paths.worktree),
                "NODE_BRANCH": paths.branch, "_NODE": str(paths.node_dir)})
    if script.is_file() and script.stat().st_size == 0:  # bash would do nothing, exit 0
        with open_log(paths.setup_log):  # emptied, never through a symlink
            pass
        code = 0
    else:
        parts.reporter.release()  # the script's output streams live
        try:
            code = commands.run_teed(confine(["bash", str(script)], paths.worktree),
                                      cwd=paths.worktree, env=launch_env(env),
                                      log_path=paths.setup_log,
                                      echo=parts.reporter.raw_output)
        finally:
            after_launch()
    took = parts.clock.monotonic() - started
    if code == 0:
        parts.reporter.banner_close("Setup", "done", took)
        return None
    tail = _tail(paths.setup_log)
    parts.reporter.banner_close("Setup", f"failed (exit {code})", took)
    return clip_reason(f"setup failed: {tail}" if tail else f"setup failed (exit {code})")


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
