"""Backstop commits: save whatever an iteration left uncommitted (seed: "Backstop commits").

The loop calls this after each iteration (``auto``), at run end (``final``) and on failure
paths. It bypasses hooks and lint by design (``--no-verify``) and folds a capped diffstat
into the body so the save describes itself in git history alone (reference 4.12). Staging
uses the shared runtime-artifact excludes, so an artifact is never committed even when
``info/exclude`` is stale or empty (reference bug ledger #4).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from fractal.errors import GitError
from fractal.workspace.artifacts import exclude_pathspecs, is_runtime_artifact
from fractal.workspace.commit_lock import git_processes_in
from fractal.workspace.git import head_sha, run_git

__all__ = ["STALE_LOCK_AGE", "STAT_LINES", "backstop_commit"]

log = logging.getLogger(__name__)

STAT_LINES = 20
"""Most diffstat file lines folded into a backstop body (reference 4.12)."""
STALE_LOCK_AGE = 60.0
"""Seconds after which an ``index.lock`` with no live git process is deemed abandoned."""


def _stage(worktree: Path) -> None:
    run_git(["add", "--all", "--", ".", *exclude_pathspecs()], worktree)
    # Never commit an artifact, even one somebody staged by hand earlier.
    staged = run_git(["diff", "--cached", "--name-only", "-z", "--no-renames"], worktree).stdout
    artifacts = [p for p in staged.split("\0") if p and is_runtime_artifact(p)]
    if artifacts:
        run_git(["reset", "--quiet", "--", *artifacts], worktree)


def _diffstat(worktree: Path) -> str:
    out = run_git(["diff", "--cached", "--stat=120", "--no-color", "--no-ext-diff"],
                  worktree).stdout
    lines = [line.rstrip() for line in out.splitlines() if line.strip()]
    files, summary = lines[:-1], lines[-1:]
    if len(files) <= STAT_LINES:
        return "\n".join(files + summary)
    return "\n".join([*files[:STAT_LINES], f"... {len(files) - STAT_LINES} more files"])


def _commit(worktree: Path, subject: str, body: str) -> str | None:
    _stage(worktree)
    if run_git(["diff", "--cached", "--quiet"], worktree, check=False).returncode == 0:
        return None
    message = subject.strip()
    if body.strip():
        message += "\n\n" + body.strip()
    message += "\n\n" + _diffstat(worktree)
    run_git(["commit", "--no-verify", "--quiet", "--cleanup=whitespace", "-m", message],
            worktree)
    return head_sha(worktree)


def _git_running_in(worktree: Path) -> bool:
    """Tell whether any live git process has its cwd inside ``worktree``."""
    return bool(git_processes_in(worktree))


def _clear_stale_lock(worktree: Path) -> bool:
    """Remove this worktree's abandoned ``index.lock``; return True when one was removed."""
    raw = run_git(["rev-parse", "--git-path", "index.lock"], worktree).stdout.strip()
    lock = Path(raw) if Path(raw).is_absolute() else worktree / raw
    try:
        age = time.time() - lock.stat().st_mtime
    except FileNotFoundError:
        return False
    if age < STALE_LOCK_AGE or _git_running_in(worktree):
        return False
    log.warning("removing stale git lock %s (%.0fs old, no git process running)", lock, age)
    lock.unlink(missing_ok=True)
    return True


def backstop_commit(worktree: Path, *, subject: str, body: str = "") -> str | None:
    """Commit everything left in ``worktree`` except runtime artifacts; return the new sha.

    ``subject`` is the commit subject (the caller composes it, e.g. ``<branch>: iteration 2.3
    (auto)``); ``body`` is an optional paragraph (e.g. the failure and the steps that never
    ran). The message is subject, body, then the ``git diff --cached --stat`` output capped
    at STAT_LINES file lines plus ``... N more files`` when cut. Hooks are bypassed
    (``--no-verify``). Returns None when nothing is left to commit. A stale ``index.lock``
    (older than STALE_LOCK_AGE seconds, no live git process in the worktree) is removed with
    a logged warning and the whole attempt retried once. Raises GitError otherwise.
    """
    try:
        return _commit(worktree, subject, body)
    except GitError:
        if not _clear_stale_lock(worktree):
            raise
    return _commit(worktree, subject, body)
