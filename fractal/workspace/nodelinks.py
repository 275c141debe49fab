"""Links under ``.fractal/``: never committed, never followed.

A node's ``.fractal/<branch>/`` holds its NODE.md, steps, scripts and config, and the
tree's data dir is ``.fractal/<root>/``. An agent cannot make a link there in its
worktree (the directory is read-only inside the sandbox), but it can stage one through
the index (``git update-index --cacheinfo 120000,...``) and commit it. A child forked from
that branch would check the link out where its node dir belongs, and every seed write
would follow it: into another node's dir, the tree's data dir or any directory.

So a symbolic link or gitlink entry at ``.fractal`` or under it is dropped from the index
by ``fractal commit`` and the backstop commit (``drop_staged_links``), and from a fresh
node worktree before it is seeded (``drop_node_links``, which also removes the checked-out
link). A merge never carries one: nothing under ``.fractal/`` travels
(``workspace/merge.py`` puts the target's own subtree back). Whatever fractal then writes into a node dir goes through ``real_dirs``, which
checks each path component with ``lstat`` and removes a link or file in a directory's
place instead of following it.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from pathlib import Path

from fractal.domain.merge.rules import NODE_DIRS
from fractal.workspace.git import run_git

__all__ = ["LINK_MODES", "NODE_DIRS", "drop_node_links", "drop_staged_links", "real_dirs",
           "real_node_dir", "remove_entry", "under_node_dirs"]

LINK_MODES = ("120000", "160000")
"""Index modes that point elsewhere: a symbolic link and a gitlink (a submodule commit)."""


def under_node_dirs(path: str) -> bool:
    """Whether the worktree-relative ``path`` is ``.fractal`` or lies under it."""
    return path == NODE_DIRS or path.startswith(NODE_DIRS + "/")


def node_links(worktree: Path) -> list[str]:
    """The index entries of ``worktree`` at or under ``.fractal`` whose mode is a link
    (``LINK_MODES``), as worktree-relative paths, from one ``git ls-files``. Raises
    GitError."""
    out = run_git(["ls-files", "--stage", "-z", "--", f":(top,literal){NODE_DIRS}"],
                  worktree).stdout
    links: list[str] = []
    for record in filter(None, out.split("\0")):
        meta, _, path = record.partition("\t")
        if meta.split(" ", 1)[0] in LINK_MODES and under_node_dirs(path):
            links.append(path)
    return links


def _unstage(worktree: Path, paths: Sequence[str]) -> None:
    """Remove ``paths`` from the index only (the commit that follows deletes them)."""
    run_git(["rm", "--cached", "-q", "-r", "--ignore-unmatch", "--",
             *(f":(top,literal){p}" for p in paths)], worktree)


def drop_staged_links(worktree: Path, staged: Sequence[str]) -> list[str]:
    """Before a commit: drop every link entry at or under ``.fractal`` from the index of
    ``worktree`` so the commit never records one (a link already on the branch is
    deleted by it); the paths dropped, ``[]`` at once (no git run) when no path of
    ``staged`` (the staged paths) lies there. The worktree's files are left as they are.
    Raises GitError."""
    if not any(under_node_dirs(p) for p in staged):
        return []
    links = node_links(worktree)
    if links:
        _unstage(worktree, links)
    return links


def drop_node_links(worktree: Path) -> list[str]:
    """In a fresh node worktree, before anything is written into it: drop every link
    entry at or under ``.fractal`` that the fork carried, from the index (the seed commit
    records the removal) and from disk (the link itself is unlinked, its target never
    touched); the paths dropped. Raises GitError, OSError."""
    links = node_links(worktree)
    if not links:
        return []
    _unstage(worktree, links)
    for rel in links:
        remove_entry(worktree / rel)
    return links


def remove_entry(path: Path) -> None:
    """Remove what sits at ``path`` without following it: a link or file is unlinked, a
    real directory removed with its contents (``rmtree`` unlinks links inside, never
    enters them). Missing is fine. Raises OSError when it cannot be removed."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISDIR(mode):
        import shutil  # deferred: start-up cost (7 modules)

        shutil.rmtree(path)
    else:
        path.unlink()


def real_dirs(top: Path, rel: str) -> Path:
    """Make each component of ``rel`` (``/``-separated, relative) under the directory
    ``top`` a real directory, and return ``top / rel``.

    Each component is checked with ``lstat``: a real directory is kept, a symbolic link
    or any other file in its place is removed (never followed), and a missing one is
    created. ``top`` itself is trusted (the worktree fractal made). Raises OSError, and
    ValueError for a ``rel`` that climbs (``..``) or is absolute.
    """
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if rel.startswith("/") or ".." in parts:
        raise ValueError(f"not a relative path inside the worktree: {rel!r}")
    path = top
    for part in parts:
        path = path / part
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            mode = None
        if mode is not None and not stat.S_ISDIR(mode):
            path.unlink()
            mode = None
        if mode is None:
            path.mkdir()
    return path


def real_node_dir(node_dir: Path) -> Path:
    """``real_dirs`` for a node dir ``<worktree>/.fractal/<branch>``: ``.fractal`` and the
    node dir are each made a real directory (a link or file in the place of either is
    removed, never followed); returns ``node_dir``. A path of any other shape is only
    created (``mkdir -p``) and must not be a link. Raises OSError, and FractalError for a
    link at a path of another shape."""
    if node_dir.parent.name == NODE_DIRS:
        return real_dirs(node_dir.parent.parent, f"{NODE_DIRS}/{node_dir.name}")
    if node_dir.is_symlink():
        from fractal.errors import FractalError  # deferred: only this refusal needs it

        raise FractalError(f"{node_dir} is a symbolic link, not a node directory; remove "
                           "it and run the command again")
    node_dir.mkdir(parents=True, exist_ok=True)
    return node_dir
