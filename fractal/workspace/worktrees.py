"""Node worktrees: create, roll back, list, and give each one its own commit identity.

A node ``main.parser`` is the branch ``main.parser`` checked out at
``R/.worktrees/main.parser/``. Commits made there carry the branch name as author
(``extensions.worktreeConfig`` with a per-worktree ``user.name``).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from fractal.workspace.git import branch_exists, run_git

__all__ = ["add_worktree", "remove_worktree", "set_identity", "worktree_gone", "worktree_paths"]

EMAIL_DOMAIN = "fractal.invalid"
"""Fallback e-mail domain (RFC 2606 ``.invalid``) used only when no user.email resolves."""


def add_worktree(repo: Path, branch: str, path: Path, base: str) -> None:
    """Create branch ``branch`` at ``base`` and check it out in a new worktree at ``path``.

    Runs ``git worktree add -b <branch> <path> <base>`` from ``repo`` (any worktree of the
    repository). Raises GitError when the branch already exists, ``path`` is taken or ``base``
    is not a commit; on failure call ``remove_worktree`` to undo any partial state.
    """
    run_git(["worktree", "add", "--quiet", "-b", branch, str(path), base], repo)


def remove_worktree(repo: Path, path: Path, branch: str) -> None:
    """Remove the worktree at ``path`` (force) and delete ``branch``; leave nothing behind.

    Used to roll back a failed node init, so every piece may be missing already: a worktree
    git no longer knows is deleted from disk, stale registrations are pruned, an absent
    branch is skipped. Uncommitted work in the worktree is discarded. Raises GitError only if
    the branch cannot be deleted (e.g. it is checked out in another worktree).
    """
    run_git(["worktree", "remove", "--force", "--force", str(path)], repo, check=False)
    if path.exists() or path.is_symlink():
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    run_git(["worktree", "prune"], repo)
    if branch_exists(repo, branch):
        run_git(["branch", "-D", "--end-of-options", branch], repo)


def worktree_gone(worktree: Path, branch: str) -> str | None:
    """What vanished of a node's checkout, or None while it is intact: ``"worktree"`` when
    ``worktree`` is no longer a git worktree (its ``.git`` file is gone, even if something
    recreated the directory), ``"branch"`` when ``refs/heads/<branch>`` no longer exists.
    A directory without its ``.git`` is no checkout of the node: git run there would act
    on whatever repository encloses it."""
    if not (worktree / ".git").exists():
        return "worktree"
    return None if branch_exists(worktree, branch) else "branch"


def set_identity(worktree: Path, name: str) -> None:
    """Make commits in ``worktree`` authored and committed as ``name``.

    Enables ``extensions.worktreeConfig`` on the repository and writes a per-worktree
    ``user.name=<name>``. When ``git config user.email`` resolves to nothing there (a fresh
    machine with no global identity, where every commit would fail), also writes a
    per-worktree ``user.email=<name>@fractal.invalid``; an existing email is left alone.
    Raises GitError when git refuses the configuration.
    """
    known = _config_values(worktree, ("extensions.worktreeconfig", "user.email"))
    if known.get("extensions.worktreeconfig", "").lower() not in _TRUE:
        run_git(["config", "extensions.worktreeConfig", "true"], worktree)
    run_git(["config", "--worktree", "user.name", name], worktree)
    if not known.get("user.email", "").strip():
        run_git(["config", "--worktree", "user.email", f"{name}@{EMAIL_DOMAIN}"], worktree)


_TRUE = ("true", "yes", "on", "1")  # git's spellings of a true boolean


def _config_values(worktree: Path, keys: tuple[str, ...]) -> dict[str, str]:
    """The effective value (the last one set) of each of ``keys`` (lower case) that is set
    where ``worktree`` reads its config, from one ``git config --get-regexp``."""
    pattern = "^(" + "|".join(key.replace(".", r"\.") for key in keys) + ")$"
    out = run_git(["config", "--null", "--get-regexp", pattern], worktree, check=False).stdout
    values: dict[str, str] = {}
    for entry in filter(None, out.split("\0")):
        key, _, value = entry.partition("\n")
        values[key.lower()] = value
    return values


def worktree_paths(repo: Path) -> dict[str, Path]:
    """Return ``{branch: worktree path}`` for every worktree with a branch checked out.

    Parsed from ``git worktree list --porcelain``; detached and bare entries are skipped.
    Branch names are short (``main.parser``, not ``refs/heads/main.parser``).
    """
    out = run_git(["worktree", "list", "--porcelain"], repo).stdout
    result: dict[str, Path] = {}
    for block in out.split("\n\n"):
        path: Path | None = None
        branch: str | None = None
        for line in block.splitlines():
            if line.startswith("worktree "):
                path = Path(line[len("worktree "):])
            elif line.startswith("branch refs/heads/"):
                branch = line[len("branch refs/heads/"):]
        if path is not None and branch is not None:
            result[branch] = path
    return result
