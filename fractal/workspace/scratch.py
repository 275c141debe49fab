"""Scratch index files for the merge machinery, kept where a killed process's leftovers
are found again.

The squash, the hand-back and ``node diff`` build trees in a temporary index
(``GIT_INDEX_FILE``), never in a worktree's own. They live in
``<git common dir>/fractal-scratch/``, named ``merge-<pid>-<create ms>-<random>.index``,
not in the system's temporary directory: a process killed with SIGKILL mid-merge cannot
remove its own (nor git's ``.lock`` beside it), and the next scratch index made in the
same repository, by any command, removes each one whose process is gone (its pid and
create time name it, so a reused pid does not keep it). Inside the git directory nothing
is ever staged or seen by ``git status``, and every worktree of the repository shares it.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from fractal.procs.procinfo import create_time, same_process
from fractal.workspace.git import common_dir, git_dirs

__all__ = ["SCRATCH_DIR", "scratch_index", "sweep_scratch"]

SCRATCH_DIR = "fractal-scratch"
"""The directory in the repository's git common directory that holds scratch indexes."""
_PREFIX = "merge-"


def _scratch_dir(repo: Path) -> Path:
    """``<git common dir of repo>/fractal-scratch``, made when missing (``repo``: any
    checkout of the repository, ideally its top; git is asked only when its ``.git``
    cannot be read directly). Raises GitError, OSError."""
    dirs = git_dirs(repo)
    path = (dirs[1] if dirs is not None else common_dir(repo)) / SCRATCH_DIR
    path.mkdir(exist_ok=True)
    return path


def _owner() -> str:
    """``<pid>-<create time in ms>`` of this process (``<pid>-0`` when it cannot be read)."""
    created = create_time(os.getpid())
    return f"{os.getpid()}-{round(created * 1000) if created is not None else 0}"


def _gone(pid: int, created_ms: int) -> bool:
    """Whether the process that made a scratch file is gone: no process ``pid`` created
    at ``created_ms`` (only no process ``pid`` at all when the time was not known)."""
    if created_ms == 0:
        return create_time(pid) is None
    return not same_process(pid, created_ms / 1000)


def sweep_scratch(scratch: Path) -> list[Path]:
    """Remove the scratch files in ``scratch`` whose process is gone (its pid and create
    time are in the name, so a reused pid does not keep one); return what was removed. A
    file another sweep removed first is skipped."""
    removed: list[Path] = []
    for leftover in scratch.glob(f"{_PREFIX}*"):
        pid, _, rest = leftover.name[len(_PREFIX):].partition("-")
        created = rest.partition("-")[0]
        if not (pid.isdigit() and created.isdigit()) or not _gone(int(pid), int(created)):
            continue
        with suppress(FileNotFoundError):
            leftover.unlink()
            removed.append(leftover)
    return removed


@contextmanager
def scratch_index(repo: Path) -> Iterator[dict[str, str]]:
    """A temporary index file for ``repo``'s repository, as the env entry that points git
    at it; stale ones of killed processes are swept first (see the module docstring).
    Raises GitError, OSError."""
    scratch = _scratch_dir(repo)
    sweep_scratch(scratch)
    handle, name = tempfile.mkstemp(prefix=f"{_PREFIX}{_owner()}-", suffix=".index",
                                    dir=scratch)
    os.close(handle)
    os.unlink(name)  # git creates it; an empty file is not a valid index
    try:
        yield {"GIT_INDEX_FILE": name}
    finally:
        for leftover in (name, name + ".lock"):
            with suppress(FileNotFoundError):
                os.unlink(leftover)
