"""Nested repositories: what a commit must never take as a gitlink.

A directory holding a ``.git`` of its own (what ``cargo new`` and other scaffolders make
inside a worktree) is not descended into by git: ``git status`` lists it as one entry
(``sub/``), and ``git add`` stages it as a gitlink, a bare commit id with none of its
files. Committed that way, the files exist nowhere in the node's history, and a squash
merge with ``--retire`` then deletes them. ``fractal commit`` and the backstop refuse such
a path (``NestedRepository``) and leave it on disk; a registered submodule (a path
``.gitmodules`` names) is the user's own and passes.

A changed or staged path that is a directory on disk can only be such a repository (git
lists and stages files, never a plain directory), so the check is a ``stat`` per path and
no git process.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from fractal.workspace.commit_types import NestedRepository
from fractal.workspace.gitfiles import holds_any

__all__ = ["check_no_nested", "gitlinks_holding_history", "nested_repositories"]

_GITMODULES_CAP = 1 << 20  # bytes of .gitmodules read
_MODULE_PATH = re.compile(r"^\s*path\s*=\s*(.+?)\s*$", re.MULTILINE)


def _submodules(worktree: Path) -> set[str]:
    """The paths ``.gitmodules`` registers (quotes dropped); empty when there is none."""
    try:
        with open(worktree / ".gitmodules", "rb") as fh:
            text = fh.read(_GITMODULES_CAP).decode("utf-8", "replace")
    except OSError:
        return set()
    return {m.group(1).strip('"').strip("/") for m in _MODULE_PATH.finditer(text)}


def nested_repositories(worktree: Path, paths: Iterable[str]) -> list[str]:
    """The ``paths`` (repo-relative, as ``git status`` or ``git diff --name-only`` give
    them) that are directories on disk and not registered submodules, each once."""
    found: list[str] = []
    registered: set[str] | None = None
    for path in dict.fromkeys(p.rstrip("/") for p in paths):
        target = worktree / path
        if not path or target.is_symlink() or not target.is_dir():
            continue
        if registered is None:
            registered = _submodules(worktree)
        if path not in registered:
            found.append(path)
    return found


def gitlinks_holding_history(worktree: Path, gitlinks: Iterable[str]) -> list[str]:
    """The ``gitlinks`` (repo-relative paths of mode-160000 entries, committed or staged)
    whose directory in ``worktree`` holds anything (a ``.git`` directory or file, a bare
    repository's ``HEAD``, ``objects`` and ``refs``, any file), each once, registered in
    ``.gitmodules`` or not. The node's history holds only the commit id of such a path;
    its commits, if any, are in what that directory holds, so removing the worktree would
    lose them. An empty directory (a submodule never checked out) holds nothing."""
    found: list[str] = []
    for path in dict.fromkeys(p.rstrip("/") for p in gitlinks):
        target = worktree / path
        if path and not target.is_symlink() and target.is_dir() and holds_any(target):
            found.append(path)
    return found


def check_no_nested(worktree: Path, paths: Iterable[str]) -> None:
    """Raise NestedRepository (nothing committed, nothing changed) when any of ``paths``
    is a nested repository (``nested_repositories``)."""
    found = nested_repositories(worktree, paths)
    if found:
        raise NestedRepository(found)
