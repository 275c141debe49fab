"""Git effects of the cleanup verbs: drop or re-create a node's worktree, delete its
branch, and tell which of its commits its target does not hold yet.

"Merged" is judged by content, not ancestry: a node's work lands on its target as a
squash commit, so its own commits never become ancestors of the target. A branch is
merged when merging it into the target now would change nothing outside ``.fractal/``
(node directories never travel to a target): ``git merge-tree --write-tree`` computes
that merge without touching any worktree or index.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from fractal.workspace.git import branch_exists, run_git
from fractal.workspace.mergebase import based_on, merge_base
from fractal.workspace.nodedir import BLOCK_BEGIN, BLOCK_END, write_atomic

__all__ = ["delete_branch", "drop_worktree", "remove_exclude_block", "restore_worktree",
           "unmerged_commits"]

_OUTSIDE_NODE_DIRS = (".", ":(exclude).fractal")
"""Pathspecs of everything but node directories (``.fractal/<branch>/``)."""

MAX_SUBJECTS = 200
"""At most this many commit subjects are read for a refusal's listing."""


def drop_worktree(repo: Path, path: Path) -> None:
    """Remove the worktree at ``path`` (force: its unsaved files are discarded, so write a
    rescue ref first) and prune its registration; the branch stays. A worktree already
    gone from disk is only pruned. Raises GitError when git cannot prune."""
    run_git(["worktree", "remove", "--force", "--force", str(path)], repo, check=False)
    if path.is_symlink() or path.is_file():
        path.unlink(missing_ok=True)
    elif path.exists():
        shutil.rmtree(path, ignore_errors=True)
    run_git(["worktree", "prune"], repo)


def restore_worktree(repo: Path, path: Path, branch: str) -> None:
    """Check the existing ``branch`` out again in a new worktree at ``path`` (prunes a stale
    registration of ``path`` first). Raises GitError when the branch is gone or checked
    out elsewhere."""
    run_git(["worktree", "prune"], repo)
    run_git(["worktree", "add", "--quiet", str(path), branch], repo)


def delete_branch(repo: Path, branch: str) -> bool:
    """Delete the local ``branch`` (force); False when it did not exist. Raises GitError
    when git refuses (the branch is checked out in some worktree)."""
    if not branch_exists(repo, branch):
        return False
    run_git(["branch", "-D", "--end-of-options", branch], repo)
    return True


def unmerged_commits(repo: Path, branch: str, target: str) -> tuple[str, ...]:
    """Subjects (newest first) of ``branch``'s commits whose work ``target`` lacks.

    Empty when merging ``branch`` into ``target`` would change no file outside node
    directories (a squash merge already landed it, or it never changed anything), and when
    ``branch`` is gone. Otherwise the commits of ``target..branch`` that touch files
    outside node directories and came after the last merge, at most MAX_SUBJECTS of
    them; when there is none (the difference comes from ``target`` having moved on alone)
    the listing is empty too. The merge is computed on ``mergebase.merge_base``.
    Raises GitError when ``target`` is not a commit.
    """
    if not branch_exists(repo, branch):
        return ()
    base = merge_base(repo, branch, target)  # git's own is wrong after a merge
    pair = [target, branch] if base is None else list(based_on(repo, base, target, branch))
    merged = run_git(["merge-tree", "--write-tree", "--no-messages", *pair], repo,
                     check=False)
    if merged.returncode == 0:
        tree = merged.stdout.split("\n", 1)[0].strip()
        diff = run_git(["diff", "--quiet", target, tree, "--", *_OUTSIDE_NODE_DIRS], repo,
                       check=False)
        if diff.returncode == 0:
            return ()
    since = [] if base is None else [f"^{base}"]  # what travelled before is merged
    log = run_git(["log", f"--max-count={MAX_SUBJECTS}", "--format=%s", "--end-of-options",
                   f"{target}..{branch}", *since, "--", *_OUTSIDE_NODE_DIRS], repo)
    return tuple(line for line in log.stdout.splitlines())


def remove_exclude_block(common_dir: Path) -> bool:
    """Remove fractal's block (``# >>> fractal >>>`` .. ``# <<< fractal <<<``) from
    ``<common_dir>/info/exclude``, keeping every other line; True when one was there.
    The inverse of ``ensure_exclude_block``, for the last tree of a repository."""
    exclude = common_dir / "info" / "exclude"
    try:
        old = exclude.read_text(encoding="utf-8", errors="surrogateescape")
    except FileNotFoundError:
        return False
    kept: list[str] = []
    inside = found = False
    for line in old.splitlines():
        if line.strip() == BLOCK_BEGIN:
            inside = found = True
        elif inside and line.strip() == BLOCK_END:
            inside = False
        elif not inside:
            kept.append(line)
    if found:
        write_atomic(exclude, ("\n".join(kept) + "\n" if kept else "").encode(
            "utf-8", errors="surrogateescape"))
    return found
