"""Where a checkout is: the top of the worktree holding a directory and the repository's
main worktree, from one git process (``checkout_and_main``), for every command that
starts by finding its tree."""

from __future__ import annotations

import os
from pathlib import Path

from fractal.workspace import git

__all__ = ["checkout_and_main"]

# Variables that change where git's own search from a directory may stop.
_DISCOVERY_ENV = ("GIT_CEILING_DIRECTORIES",)


def checkout_and_main(cwd: Path) -> tuple[Path, Path]:
    """(``git.toplevel(cwd)``, ``repo_root`` of that top) from one git process where the two
    calls take two, with the same answers and the same errors.

    The one process is ``git worktree list``: it finds the repository from ``cwd`` as any
    git command does (ownership checks included) and names the main worktree (or says it
    is bare). The top is the nearest directory above ``cwd`` holding a ``.git`` that
    ``git_dirs`` reads, taken only when that list names it as one of the worktrees and
    nothing else could have moved git's answer: no directory on the way looks like a git
    dir of its own, ``cwd`` is not inside a git dir, the environment relocates nothing
    and sets no ceiling, no mount point lies on the way up (git stops at one unless
    told to cross), and the repository's config sets no ``core.worktree``. Anything
    else (a bare repository included) asks ``toplevel`` and ``repo_root`` as before.
    Raises GitError as they do."""
    found = _checkout_from_files(cwd)
    if found is not None:
        proc = git.run_git(["worktree", "list", "--porcelain"], found[0], check=False)
        if proc.returncode == 0:
            blocks = [block.splitlines() for block in proc.stdout.split("\n\n")]
            paths = [lines[0][len("worktree "):] for lines in blocks
                     if lines and lines[0].startswith("worktree ")]
            first = blocks[0] if blocks else []
            if paths and first and first[0].startswith("worktree ") and "bare" not in first \
                    and str(found[0]) in paths:
                return found[0], Path(paths[0])
    top = git.toplevel(cwd)
    return top, git.repo_root(top)


def _checkout_from_files(cwd: Path) -> tuple[Path, tuple[Path, Path]] | None:
    """(the real path of the nearest directory at or above ``cwd`` with a ``.git``, its
    ``git_dirs``) when git's own search from ``cwd`` can only stop there with that
    directory as the work tree; None when git must be asked (see ``checkout_and_main``)."""
    if any(os.environ.get(name) for name in (*git.GIT_LOCATION_ENV, *_DISCOVERY_ENV)):
        return None
    try:
        here = Path(cwd).resolve(strict=True)
        device = os.stat(here).st_dev
        for place in (here, *here.parents):
            if place != here and os.stat(place).st_dev != device:
                return None  # a mount point on the way: git may stop there
            if (place / ".git").exists():
                break
            if (place / "HEAD").is_file() and (place / "objects").is_dir() \
                    and (place / "refs").is_dir():  # a git dir itself (bare, or cwd in .git)
                return None
        else:
            return None
    except (OSError, RuntimeError):
        return None
    if ".git" in here.relative_to(place).parts:
        return None
    dirs = git.git_dirs(place)
    if dirs is None:
        return None
    for config in (dirs[1] / "config", dirs[0] / "config.worktree"):
        try:
            text = config.read_text(encoding="utf-8", errors="replace").lower()
        except FileNotFoundError:
            continue
        except OSError:
            return None
        if "worktree" in text.replace("worktreeconfig", "") or "include" in text:
            return None  # core.worktree (or an include that might set it): ask git
    return place, dirs
