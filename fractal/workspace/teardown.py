"""Git effects of the cleanup verbs: drop or re-create a node's worktree, delete its
branch, and tell which of its commits its target does not hold yet.

"Merged" is judged by content, not ancestry: a node's work lands on its target as a
squash commit, so its own commits never become ancestors of the target. A branch is
merged when ``fractal node merge`` would find nothing new to bring: the same squash plan
(``merge.plan_squash``, on the merge base it picks) computed without touching any
worktree or index.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from fractal.workspace.git import branch_exists, run_git
from fractal.workspace.merge import LandedMerge, plan_squash, subjects_since_merge
from fractal.workspace.nodedir import BLOCK_BEGIN, BLOCK_END, write_atomic

__all__ = ["delete_branch", "drop_worktree", "remove_exclude_block", "restore_worktree",
           "unmerged_commits"]

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


def unmerged_commits(repo: Path, branch: str, target: str,
                     landed: LandedMerge | None = None) -> tuple[str, ...]:
    """Subjects (newest first) of ``branch``'s commits whose work ``target`` lacks.

    The question is the one ``fractal node merge`` asks, answered by the same code
    (``merge.plan_squash`` on the base it picks, ``landed`` being the branch's newest
    merge into ``target`` that landed, from the tree's records): empty when that merge
    would bring nothing (a squash merge already landed the work, or it never changed
    anything that travels), and when ``branch`` is gone. Otherwise the subjects of the
    commits since the last merge (``merge.subjects_since_merge``), at most MAX_SUBJECTS;
    when only merge commits carry the difference, one line says how many files differ, so
    the listing is never empty while work would be lost. Raises GitError when ``target``
    is not a commit.
    """
    if not branch_exists(repo, branch):
        return ()
    plan = plan_squash(repo, branch, target, landed)
    if plan.tree is not None and not plan.files:
        return ()
    subjects = subjects_since_merge(repo, plan.child_sha, plan.target_sha, MAX_SUBJECTS - 1,
                                    base=plan.base, landed=landed)
    if subjects:
        return tuple(subjects)
    what = (f"{len(plan.conflicts)} conflicting file(s)" if plan.tree is None
            else f"{len(plan.files)} file(s)")
    return (f"(merge commits of {branch} that change {what} {target} lacks)",)


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
