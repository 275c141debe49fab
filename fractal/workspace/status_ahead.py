"""A worktree's ``git status`` started ahead of the moment its answer is needed.

The backstop commit starts the status first and checks the branch and takes the commit
turn while git runs; the answer is used only when nothing a status depends on besides the
files (``HEAD``, the index, the packed refs and the branch's own ref) changed meanwhile,
else the caller asks ``git.worktree_status`` again. The git process is always collected,
and never killed (what it started would be orphaned: see ``PendingStatus.cancel``).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from fractal.workspace.git import STATUS_ARGS, git_dirs, git_env, parse_status

__all__ = ["PendingStatus", "start_worktree_status"]


_Stamp = tuple[int, int, int] | None
_Stamps = tuple[str, tuple[_Stamp, ...]]


def _stamp(path: Path) -> _Stamp:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


class PendingStatus:
    """The ``worktree_status`` of a checkout, started ahead of the moment it is needed (its
    git process runs while the caller does other work). ``result()`` gives the answer, or
    None when it cannot be trusted: git failed, or the index, ``HEAD`` or the ref it names
    changed while it ran (a commit came between); the caller then asks again."""

    def __init__(self, proc: subprocess.Popen[str], dirs: tuple[Path, Path],
                 stamps: _Stamps) -> None:
        self._proc = proc
        self._dirs = dirs
        self._stamps = stamps  # taken before the git process started
        self._out: str | None = None
        self._done = False

    def _finish(self) -> None:
        if not self._done:
            out, _err = self._proc.communicate()
            self._done = True
            self._out = out if self._proc.returncode == 0 else None

    def result(self) -> tuple[list[str], bool] | None:
        """(changed paths, whether the index matches HEAD) as ``worktree_status``, or None."""
        self._finish()
        if self._out is None or _repo_stamps(*self._dirs) != self._stamps:
            return None
        return parse_status(self._out)

    def answered(self) -> bool:
        """True once the git process has exited (``result`` then does not wait for it)."""
        return self._done or self._proc.poll() is not None

    def discard(self) -> None:
        """Collect the git process when the answer is not wanted (it is never left behind)."""
        self._finish()

    def cancel(self) -> None:
        """Collect the status whose answer lost the race (another status answered). It is
        waited for, not killed: git may have started processes of its own (a
        ``core.fsmonitor`` hook, a submodule's ``git status``) that ending git alone would
        orphan, still holding its stderr (this call would wait on them all the same) and,
        in the supervisor (a subreaper), left as zombies for the rest of the run. Git
        collects them itself (the loser, the backstop's own status, started after the
        winner: it is usually about done)."""
        self._finish()


def _repo_stamps(gitdir: Path, common: Path) -> _Stamps:
    """What a status answer depends on besides the files: ``HEAD``, the index, the refs."""
    try:
        head = (gitdir / "HEAD").read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        head = ""
    ref = head[len("ref: "):] if head.startswith("ref: refs/") else None
    paths = [gitdir / "index", common / "packed-refs"]
    if ref is not None and ".." not in ref:
        paths.append(common / ref)
    return head, tuple(_stamp(p) for p in paths)


def start_worktree_status(cwd: Path) -> PendingStatus | None:
    """Start ``worktree_status(cwd)`` now; None when ``cwd`` is not a checkout's top (or
    git cannot start): ask ``worktree_status`` then."""
    dirs = git_dirs(cwd)
    if dirs is None:
        return None
    stamps = _repo_stamps(*dirs)
    try:
        proc = subprocess.Popen(
            ["git", "-C", str(cwd), *STATUS_ARGS], stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, encoding="utf-8",
            errors="replace", env=git_env(cwd=cwd))
    except OSError:
        return None
    return PendingStatus(proc, dirs, stamps)
