"""The merge base of a merge between a child and its target, and the advance that moves it.

A merged child's branch gets a merge-base advance (``advance_base``): a commit with the
child's own tree whose parents are the child's tip and the squash, as ``git merge -s ours``
makes. It tells the next merge what already travelled. But git reads it as "the child
holds the squash", so git's own merge base would then be the squash, whose tree holds what
the target had then (its own work, siblings' merged work) and the child never had: every
merge that trusts git's base would read all of it as deleted by the child. ``merge_base``
names the right base instead, and ``based_on`` builds the two scratch commits that make
``git merge-tree`` use it, for the squash and the hand-back alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fractal.workspace.git import run_git

__all__ = ["LandedMerge", "advance_base", "advance_subject", "based_on", "contains",
           "is_advance", "merge_base"]


@dataclass(frozen=True)
class LandedMerge:
    """A squash that landed on the target: ``squash_sha`` holds the child's work up to
    ``child_sha`` (a ``merges`` row settled ``merged``)."""

    child_sha: str
    squash_sha: str


def merge_base(repo: Path, child_sha: str, target_sha: str,
               landed: LandedMerge | None = None) -> str | None:
    """The commit whose tree a merge between ``child_sha`` and ``target_sha`` must take as
    its base (the squash, and the target's tip handed back into the child alike), or None
    when git's own merge base is right.

    The rule: the newest point at which the target held all of the child's work. That is
    the child's newest merge-base advance the target holds (on the child's first-parent
    line), or ``landed``'s child commit when that is newer (its advance could not land: the
    child moved during the merge); but a real merge of the target's tip into the child (a
    hand-back) after both makes git's own base, that tip, right. Git's own base is never
    right while an advance is the newest: the advance names the squash as a parent, so git
    would take the squash as the base, whose tree holds what the target had then (its own
    work, siblings' merged work) and the child never had, and read all of it as deleted by
    the child."""
    found: str | None = None
    advance = False
    merges = run_git(["rev-list", "--merges", "--first-parent", "--max-count=200", "--parents",
                      child_sha, f"^{target_sha}"], repo).stdout.splitlines()
    for line in merges:  # each merge with its parents: "<commit> <first> <second> ..."
        parents = line.split()
        if len(parents) >= 3 and contains(repo, target_sha, parents[2]):
            found, advance = parents[0], _is_advance(repo, parents, target_sha, held=True)
            break
    if landed is not None and contains(repo, target_sha, landed.squash_sha) and \
            contains(repo, child_sha, landed.child_sha) and \
            (found is None or contains(repo, landed.child_sha, found)):
        return landed.child_sha
    return found if advance else None


_SCRATCH_ID = {"GIT_AUTHOR_NAME": "fractal", "GIT_AUTHOR_EMAIL": "fractal@localhost",
               "GIT_COMMITTER_NAME": "fractal", "GIT_COMMITTER_EMAIL": "fractal@localhost"}


def based_on(repo: Path, base: str, left: str, right: str) -> tuple[str, str]:
    """Two scratch commits with the trees of ``left`` and ``right`` on one parent holding
    the tree of ``base`` (see ``merge_base``): merged, they apply to each side only what
    the other did since ``base``."""
    def scratch(tree: str, *parents: str) -> str:
        flags = [arg for parent in parents for arg in ("-p", parent)]
        return run_git(["commit-tree", tree, *flags, "-m", "fractal: scratch merge base"],
                       repo, env=_SCRATCH_ID).stdout.strip()

    parent = scratch(f"{base}^{{tree}}")
    return scratch(f"{left}^{{tree}}", parent), scratch(f"{right}^{{tree}}", parent)


def advance_subject(child: str, target: str, squash_sha: str) -> str:
    """The subject of ``child``'s merge-base advance past ``squash_sha`` on ``target``:
    ``<child>: merged into <target> (<squash, 10 hex>)``. It names its own second parent,
    which is what tells an advance from a merge that only looks like one (``is_advance``)."""
    return f"{child}: merged into {target} ({squash_sha[:10]})"


def is_advance(repo: Path, commit: str, target_sha: str) -> bool:
    """A merge-base advance (``merge -s ours``), not real work: a merge whose tree is its
    first parent's, whose second parent the target holds, and whose subject is the one
    ``advance_subject`` gives it (naming that second parent). A conflict handed back and
    resolved by keeping the child's side has the same tree and parents, but is the
    child's real work: without the subject it would be read as merged already."""
    parents = run_git(["rev-list", "--parents", "--max-count=1", commit], repo).stdout.split()
    return _is_advance(repo, parents, target_sha)


def _is_advance(repo: Path, parents: list[str], target_sha: str, *,
                held: bool | None = None) -> bool:
    """``is_advance`` of ``parents[0]`` given its parents (``rev-list --parents``: the
    commit, then its parents); ``held``: whether the target holds the second parent, when
    the caller has asked already."""
    if len(parents) < 3:
        return False
    same = run_git(["rev-parse", f"{parents[0]}^{{tree}}", f"{parents[1]}^{{tree}}"],
                   repo).stdout.split()
    if len(same) != 2 or same[0] != same[1]:
        return False
    subject = run_git(["log", "-1", "--format=%s", parents[0]], repo).stdout.strip()
    if not (": merged into " in subject and subject.endswith(f" ({parents[2][:10]})")):
        return False
    return held if held is not None else contains(repo, target_sha, parents[2])


def contains(repo: Path, branch_or_sha: str, sha: str) -> bool:
    """Tell whether commit ``sha`` is reachable from ``branch_or_sha``."""
    return run_git(["merge-base", "--is-ancestor", sha, branch_or_sha], repo,
                   check=False).returncode == 0


def advance_base(repo: Path, child: str, child_sha: str, squash_sha: str,
                 message: str) -> str | None:
    """Record on branch ``child`` that ``squash_sha`` holds its work up to ``child_sha``:
    a commit with the child's tree and parents (child tip, squash) and ``message`` (whose
    subject must be ``advance_subject``'s, or ``is_advance`` never reads it as an advance
    and the next merge takes the squash for git's own base), moved onto the branch
    only if it still points at ``child_sha``. Returns the new tip, or None when the branch
    moved meanwhile (new work: the next merge simply carries it) or already holds it."""
    if contains(repo, child, squash_sha):
        return None
    commit = run_git(["commit-tree", f"{child_sha}^{{tree}}", "-p", child_sha, "-p",
                      squash_sha, "-F", "-"], repo, stdin=message.rstrip() + "\n").stdout.strip()
    proc = run_git(["update-ref", "--no-deref", "-m", "fractal: merge base advance",
                    f"refs/heads/{child}", commit, child_sha], repo, check=False)
    return commit if proc.returncode == 0 else None
