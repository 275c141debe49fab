"""Answers read from a checkout's git dir files, with no git process: where its git dir
and common dir are (``git_dirs``), the text of ``HEAD`` or a loose ref, the id a loose
branch ref holds, and whether a branch is surely absent.

A loop asks for these before every step and a git process costs 2-5 ms; each function
answers None (or False) wherever the files could answer otherwise than git, and
``git.py`` then asks git.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

__all__ = ["GIT_LOCATION_ENV", "SHA", "git_dirs", "holds_any", "loose_ref", "read_ref_file", "safe_branch", "surely_absent"]


def read_ref_file(path: Path) -> str | None:
    """The stripped text of the ref file ``path`` (``HEAD`` or a loose ref): None when
    there is no such file, "" when it cannot be read as one plain file (a symlink, which
    git may read as a symbolic ref; a directory; bytes that are not UTF-8)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError:  # ELOOP for a symlink, ENOTDIR under a file, EACCES
        return ""
    try:
        return os.read(fd, 4096).decode("utf-8").strip()  # (no file object: a loop asks
    except (OSError, UnicodeDecodeError):                 # per step)
        return ""
    finally:
        os.close(fd)


def safe_branch(branch: str) -> bool:
    """True when ``refs/heads/<branch>`` cannot leave the refs directory."""
    return bool(branch) and ".." not in branch and not branch.startswith("/")


SHA = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")


def loose_ref(cwd: Path, branch: str) -> tuple[Path, str] | None:
    """(common dir, the id ``refs/heads/<branch>``'s loose ref file holds) when ``cwd`` is
    a checkout's top and that file holds an id (no git process); None otherwise (packed,
    missing, symbolic, a symlink, or a name that could leave the refs directory). The id
    may name anything: ``objects.commit_known`` tells whether it is a commit."""
    dirs = git_dirs(cwd)
    if dirs is None or not safe_branch(branch):
        return None
    value = read_ref_file(dirs[1] / "refs" / "heads" / branch)
    if value is None or not SHA.fullmatch(value):
        return None
    return dirs[1], value


def surely_absent(cwd: Path, branch: str) -> bool:
    """True when ``cwd`` is a checkout's top and neither a loose ref file (nor anything
    else at its path) nor a ``packed-refs`` file could hold ``refs/heads/<branch>``."""
    dirs = git_dirs(cwd)
    if dirs is None or not safe_branch(branch):
        return False
    try:
        return not (os.path.lexists(dirs[1] / "refs" / "heads" / branch)
                    or os.path.lexists(dirs[1] / "packed-refs"))
    except (OSError, ValueError):
        return False


GIT_LOCATION_ENV = ("GIT_DIR", "GIT_COMMON_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE")


def git_dirs(cwd: Path) -> tuple[Path, Path] | None:
    """(git dir, common dir) of the checkout whose top is ``cwd``, read from its ``.git``
    (a directory, or a worktree's ``gitdir:`` file and the ``commondir`` beside it), for
    reading ``HEAD`` and loose refs without a git process. None when git itself must be
    asked: ``cwd`` is not a checkout's top, the environment relocates the repository
    (``GIT_DIR`` and friends), or the refs are not stored as files (reftable)."""
    if any(os.environ.get(name) for name in GIT_LOCATION_ENV):
        return None
    dot = Path(cwd) / ".git"
    try:
        if dot.is_dir():
            gitdir, text = dot, ""
        else:
            text = dot.read_text(encoding="utf-8").strip()
            if not text.startswith("gitdir: "):
                return None
            gitdir = Path(cwd) / text[len("gitdir: "):]
        common_file = gitdir / "commondir"
        common_text = (common_file.read_text(encoding="utf-8").strip()
                       if common_file.is_file() else None)
    except (OSError, UnicodeDecodeError):
        return None
    key = (str(cwd), text, common_text)
    found = _GIT_DIRS.get(key)  # resolving walks every component: a loop asks per step
    if found is None:
        try:
            found = (gitdir.resolve() if text else gitdir,) * 2
            if common_text is not None:
                found = (found[0], (found[0] / common_text).resolve())
        except OSError:
            return None
        if Path(cwd).is_absolute():
            _GIT_DIRS[key] = found
    gitdir, common = found
    if not (gitdir / "HEAD").is_file() or (common / "reftable").exists() \
            or not ((common / "refs").is_dir() and (common / "objects").is_dir()):
        return None  # (git takes no directory without refs and objects for a repository)
    return gitdir, common


_GIT_DIRS: dict[tuple[str, str, str | None], tuple[Path, Path]] = {}


def holds_any(folder: Path) -> bool:
    """Whether the directory ``folder`` has any entry (False: missing, or not a dir): one
    ``os.scandir``, e.g. a node's private object directory before any adoption."""
    try:
        with os.scandir(folder) as entries:
            return next(entries, None) is not None
    except OSError:
        return False
