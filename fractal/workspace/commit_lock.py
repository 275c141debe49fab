"""The worktree's ``index.lock``: tell a live holder from a stale leftover.

A git process killed mid-write leaves ``index.lock`` behind and every later git write in that
worktree fails. The lock is removed only when no git process for the worktree is alive (one
whose working directory is the worktree or lies inside it); while one is, the caller gets a
clear ``IndexLocked`` error naming it, and the lock is left alone. The backstop commit uses
``git_processes_in`` too, so both paths agree on "a git process is alive here".
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from fractal.workspace.commit_types import IndexLocked
from fractal.workspace.git import git_paths
from fractal.workspace.nodedir import flock_held

__all__ = ["COMMIT_TURN_WAIT", "LOCK_SETTLE", "clear_index_lock", "commit_turn",
           "git_processes_in", "index_lock_path"]

COMMIT_TURN_WAIT = 960.0
"""Seconds a commit waits for another one in the same worktree to finish: the longest a
healthy ``fractal commit`` can take (lint 600 s + push 300 s) and a minute of git."""

LOCK_SETTLE = 3.0
"""Seconds to wait for a present ``index.lock`` to vanish on its own (a git run finishing)."""
_POLL = 0.05


def index_lock_path(worktree: Path) -> Path:
    """Return the absolute path of ``worktree``'s ``index.lock`` (per worktree: linked
    worktrees keep theirs under ``<common>/worktrees/<name>/``). Raises GitError."""
    return git_paths(worktree, ["index.lock"])[0]


def git_processes_in(worktree: Path) -> list[tuple[int, str]]:
    """Return ``[(pid, command line)]`` of live git processes whose cwd is in ``worktree``.

    A process counts when its name starts with ``git`` and its working directory is the
    worktree or below it (``git -C`` changes directory first). Processes that cannot be
    inspected (another user's, already gone, zombies) are skipped.
    """
    import psutil  # deferred: start-up cost (psutil, 18 modules)

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


def clear_index_lock(worktree: Path, *, settle: float | None = None) -> str | None:
    """Make sure ``worktree``'s index is not locked before the pipeline writes it.

    Returns None when there is no lock (waiting up to ``settle`` seconds, LOCK_SETTLE as it
    is at the call when None, for one to vanish), or a notice naming the stale lock it
    removed because no git process for the worktree is alive. Raises IndexLocked, leaving
    the lock in place, while such a process runs.
    """
    lock = index_lock_path(worktree)
    deadline = time.monotonic() + (LOCK_SETTLE if settle is None else settle)
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


@contextmanager
def commit_turn(worktree: Path, *, wait: float = COMMIT_TURN_WAIT) -> Iterator[bool]:
    """Hold ``worktree``'s commit turn: one commit at a time per worktree.

    ``fractal commit`` and the loop's backstop commit both take it. An exclusive
    ``flock`` on ``fractal-commit.lock`` in the worktree's own git dir (outside the tree,
    never staged; the kernel drops it when a holder dies, so it never goes stale). Two
    commits started together run one after the other instead of colliding on
    ``index.lock``. Raises IndexLocked after ``wait`` seconds (a commit waiting on itself,
    say from a hook, gets that error instead of a deadlock) or when the lock path is not
    a regular file, and GitError when the git dir cannot be found. Gives the body whether
    it waited for another holder (the worktree may have changed meanwhile).
    """
    raw = str(git_paths(worktree, ["fractal-commit.lock"])[0])
    with flock_held(_open_lock(raw), wait, lambda: IndexLocked(
            f"another commit has been running in {worktree} for over {wait:g}s ({raw} is "
            "held); wait for it to finish and retry")) as waited:
        yield waited


def _open_lock(path: str) -> int:
    """Open (creating) the turn lock file without ever blocking; IndexLocked unless it is a
    regular file (a FIFO, directory or link left there would hang, fail later, or make a
    file where the link points)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NONBLOCK | os.O_CLOEXEC
                     | os.O_NOFOLLOW, 0o644)  # a link the agent left there: never created through
    except OSError as exc:
        raise IndexLocked(f"cannot open the commit lock {path}: {exc.strerror}; remove it and "
                          "retry") from exc
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise IndexLocked(f"the commit lock {path} is not a regular file; remove it and retry")
    return fd
