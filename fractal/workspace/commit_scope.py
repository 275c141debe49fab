"""The scope check of ``fractal commit`` (docs/commit.md).

Every changed path (working tree, index and untracked; runtime artifacts and ignored files
aside) must fall under a scope root, the node's data directory or the shared project wiki
(``wiki/``). A root covers itself and everything below it, matched by whole path segments
(``src`` covers ``src/a.py``, never ``srcs/a.py``). Roots are canonical (``./src``, ``src/``
and ``src`` all arrive as ``src``: ``domain.config.normalise_scope``). An unscoped node
(no roots) allows every path.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from fractal.workspace.commit_types import ScopeViolation, listing
from fractal.workspace.git import changed_paths

__all__ = ["WIKI_ROOT", "allowed_roots", "check_scope", "covered", "out_of_scope"]

WIKI_ROOT = "wiki"
"""The shared project wiki, always inside every node's scope."""


def allowed_roots(scope: Sequence[str], node_dir: str) -> tuple[str, ...] | None:
    """Return the roots a scoped node may change: ``scope``, then ``node_dir`` and ``wiki``.

    ``scope`` holds canonical worktree-relative roots; ``node_dir`` is the node data dir
    relative to the worktree (``.fractal/<branch>``). Returns None for an unscoped node
    (empty ``scope``): everything is allowed and the whole worktree is staged.
    """
    if not scope:
        return None
    roots: list[str] = []
    for root in (*scope, node_dir.strip("/"), WIKI_ROOT):
        if root and root not in roots:
            roots.append(root)
    return tuple(roots)


def covered(path: str, roots: Iterable[str]) -> bool:
    """Tell whether the repo-relative posix ``path`` is a root or lies below one."""
    clean = path.rstrip("/")
    return any(clean == root or clean.startswith(root + "/") for root in roots)


def out_of_scope(paths: Iterable[str], roots: Sequence[str] | None) -> list[str]:
    """Return the ``paths`` no root covers, in order (none when ``roots`` is None)."""
    if roots is None:
        return []
    return [path for path in paths if not covered(path, roots)]


def check_scope(worktree: Path, branch: str, roots: Sequence[str] | None) -> None:
    """Refuse when a changed path in ``worktree`` lies outside ``roots``.

    Raises ScopeViolation listing the offending paths (nothing has been staged); returns
    None when every path is covered or the node is unscoped (``roots`` None). Raises
    GitError when ``git status`` fails.
    """
    if roots is None:
        return
    bad = out_of_scope(changed_paths(worktree), roots)
    if bad:
        raise ScopeViolation(
            f"{len(bad)} changed path(s) lie outside the scope of {branch} "
            f"({', '.join(roots)}): {listing(bad)}; nothing was staged. Move or revert them, "
            "or commit them anyway with `fractal commit --ignore-scope MESSAGE`", bad)
