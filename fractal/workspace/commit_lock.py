"""The worktree's ``index.lock``: tell a live holder from a stale leftover (issue 6, robustness).

A git process killed mid-write leaves ``index.lock`` behind and every later git write in that
worktree fails. The lock is removed only when no git process for the worktree is alive (one
whose working directory is the worktree or lies inside it); while one is, the caller gets a
clear ``IndexLocked`` error naming it, and the lock is left alone. The backstop commit uses
``git_processes_in`` too, so both paths agree on "a git process is alive here".
"""

from __future__ import annotations

import time
from pathlib import Path

from fractal.workspace.commit_types import IndexLocked
from fractal.workspace.git import run_git

__all__ = ["LOCK_SETTLE", "clear_index_lock", "git_processes_in", "index_lock_path"]

LOCK_SETTLE = 3.0
"""Seconds to wait for a present ``index.lock`` to vanish on its own (a git run finishing)."""
_POLL = 0.05


def index_lock_path(worktree: Path) -> Path:
    """Return the absolute path of ``worktree``'s ``index.lock`` (per worktree: linked
    worktrees keep theirs under ``<common>/worktrees/<name>/``). Raises GitError."""
    raw = run_git(["rev-parse", "--path-format=absolute", "--git-path", "index.lock"],
                  worktree).stdout.strip()
    return Path(raw)


def git_processes_in(worktree: Path) -> list[tuple[int, str]]:
    """Return ``[(pid, command line)]`` of live git processes whose cwd is in ``worktree``.

    A process counts when its name starts with ``git`` and its working directory is the
    worktree or below it (``git -C`` changes directory first). Processes that cannot be
    inspected (another user's, already gone, zombies) are skipped.
    """
    import psutil

    top = worktree.resolve()
    found: list[tuple[int, str]] = []
    for proc in psutil.process_iter(["name"]):
        try:
            if not str(proc.info["name"] or "").startswith("git"):
                continue
            cwd = Path(proc.cwd()).resolve()
            if cwd == top or top in cwd.parents:
                found.append((proc.pid, " ".join(proc.cmdline()) or str(proc.info["name"])))
        except (psutil.Error, OSError):
            continue
    return found


def clear_index_lock(worktree: Path, *, settle: float = LOCK_SETTLE) -> str | None:
    """Make sure ``worktree``'s index is not locked before the pipeline writes it.

    Returns None when there is no lock (waiting up to ``settle`` seconds for one to vanish),
    or a notice naming the stale lock it removed because no git process for the worktree is
    alive. Raises IndexLocked, leaving the lock in place, while such a process runs.
    """
    lock = index_lock_path(worktree)
    deadline = time.monotonic() + settle
    while lock.exists():
        if time.monotonic() >= deadline:
            break
        time.sleep(_POLL)
    if not lock.exists():
        return None
    holders = git_processes_in(worktree)
    if holders:
        who = "; ".join(f"pid {pid}: {cmd[:80]}" for pid, cmd in holders[:3])
        raise IndexLocked(
            f"{lock} is held by a running git process ({who}); wait for it to finish and "
            "retry (the lock is removed automatically once no git process runs here)")
    lock.unlink(missing_ok=True)
    return f"removed a stale {lock} (no git process is running in {worktree})"
