"""``fractal node diff``: what merging a node would bring into its target now.

Computed like the merge itself (``workspace.merge.plan_squash``), in the shared object store
alone once the node's private objects are adopted (a snapshot while its launch may live,
``lifecycle.adopting``): nothing under ``.fractal/`` is shown, since it never travels. When
the merge would conflict, the node's own changes since the merge base are shown instead,
with a notice naming the conflicting files. Readable by the operator for any node and by a
node for its descendants; any other caller is refused and the refusal recorded.
"""

from __future__ import annotations

from dataclasses import dataclass

from fractal.errors import FractalError
from fractal.lifecycle.adopting import take_objects
from fractal.lifecycle.context import Context, Refused
from fractal.lifecycle.merge.target import landed_merge, merge_target, resolve_child
from fractal.tree import Tree
from fractal.workspace import git
from fractal.workspace import merge as gitmerge

__all__ = ["NodeDiff", "diffstat_summary", "node_diff", "uncommitted_note", "with_uncommitted"]


@dataclass(frozen=True)
class NodeDiff:
    """The diff text (patch or diffstat; empty: nothing new), the target it is against,
    the paths that would conflict, and notices for stderr."""

    node: str
    target: str
    text: str
    conflicts: tuple[str, ...] = ()
    notices: tuple[str, ...] = ()


def node_diff(ctx: Context, name: str, *, stat: bool = False) -> NodeDiff:
    """What merging ``name`` into its target would bring now, the child's private git
    objects adopted first as for the merge (``lifecycle.adopting``). Raises Refused (the
    acting node may look only at itself and its descendants, ``fractal.domain.authority``;
    a branch that needs an object adoption refused), NodeNotFound, FractalError,
    GitError."""
    tree = ctx.tree
    child = resolve_child(ctx, name)
    ctx.authorize("diff", child)
    target = merge_target(tree, child, None)
    if not git.branch_exists(tree.repo, target):
        raise Refused(f"{child}'s target {target} is not a branch; nothing to diff against")
    row = ctx.ledger.node(child)  # computed as the merge is, from the shared store alone:
    taken = take_objects(tree, child, None if row is None else row.status, "diff",
                         besides=f"refs/heads/{target}", always_check=False)
    if taken.refusal:  # what a live launch committed is adopted first (a snapshot)
        raise Refused(taken.refusal)
    plan = gitmerge.plan_squash(tree.repo, child, target, landed_merge(tree, child, target))
    loose, loose_note = _uncommitted(tree, child, stat=stat)
    if plan.tree is not None:
        text = gitmerge.diff_text(tree.repo, plan.target_sha, plan.tree, stat=stat)
        if plan.files:
            notices: tuple[str, ...] = ()
        elif loose:
            notices = (f"nothing new committed: {target} holds all of {child}'s committed "
                       "work",)
        else:
            notices = (f"nothing new: {target} holds all of {child}'s work",)
        return NodeDiff(child, target, _joined(text, loose),
                        notices=(*notices, *loose_note))
    base = plan.base or git.run_git(["merge-base", plan.target_sha, plan.child_sha],
                                    tree.repo).stdout.strip()
    text = gitmerge.diff_text(tree.repo, base, plan.child_sha, stat=stat)
    notice = (f"merging {child} into {target} now would conflict in "
              f"{', '.join(plan.conflicts)}; shown: {child}'s own changes since they parted")
    return NodeDiff(child, target, _joined(text, loose), plan.conflicts,
                    (notice, *loose_note))


UNCOMMITTED_HEADER = "# uncommitted in {worktree} (a merge brings these only once committed):"
"""The line that opens the uncommitted part of ``node diff``'s output."""


def _uncommitted(tree: Tree, child: str, *, stat: bool) -> tuple[str, tuple[str, ...]]:
    """The child's worktree changes not committed yet (tracked edits and untracked files
    git does not ignore; its node directory aside), under ``UNCOMMITTED_HEADER``, and the
    notice that says so; ('', ()) when there are none or no worktree to look at."""

    worktree = tree.node(child).worktree
    if not worktree.is_dir():
        return "", ()
    try:
        now = gitmerge.worktree_tree(worktree)
        text = gitmerge.diff_text(worktree, "HEAD", now, stat=stat)
    except FractalError:
        return "", ()
    if not text:
        return "", ()
    header = UNCOMMITTED_HEADER.format(worktree=worktree)
    return f"{header}\n{text}", (f"{child}'s worktree holds uncommitted changes, shown "
                                 "after a '# uncommitted' line",)


def _joined(committed: str, loose: str) -> str:
    return "\n".join(part for part in (committed, loose) if part)


def uncommitted_note(tree: Tree, branch: str) -> str:
    """``N uncommitted file(s)`` for the project files changed in ``branch``'s worktree
    and not committed (its node directory aside: it never travels), '' when none or when
    there is no worktree to look at."""

    worktree = tree.node(branch).worktree
    if not worktree.is_dir():
        return ""
    try:
        changed = [p for p in git.changed_paths(worktree) if not p.startswith(".fractal/")]
    except FractalError:
        return ""
    return f"{len(changed)} uncommitted file(s)" if changed else ""


def with_uncommitted(stat: str | None, note: str) -> str | None:
    """A diffstat line with the uncommitted-files ``note`` appended (``nothing new; 2
    uncommitted file(s)``); ``stat`` unchanged when ``note`` is empty."""
    if not note:
        return stat
    return note if stat is None else f"{stat}; {note}"


def diffstat_summary(tree: Tree, child: str) -> str:
    """One line for listings: ``2 files changed, 3 insertions(+)``, ``conflicts: a, b``,
    ``nothing new``, or ``?`` when git cannot tell; ``; N uncommitted file(s)`` appended
    when the child's worktree holds project edits not committed yet (a merge would not
    bring them)."""
    return with_uncommitted(_committed_summary(tree, child), uncommitted_note(tree, child)) \
        or ""


def _committed_summary(tree: Tree, child: str) -> str:

    target = merge_target(tree, child, None)
    try:
        plan = gitmerge.plan_squash(tree.repo, child, target,
                                    landed_merge(tree, child, target))
        if plan.tree is None:
            return "conflicts: " + ", ".join(plan.conflicts)
        if not plan.files:
            return "nothing new"
        lines = gitmerge.diffstat_lines(tree.repo, plan.target_sha, plan.tree)
        return lines[-1].strip() if lines else f"{len(plan.files)} file(s)"
    except FractalError:
        return "?"
