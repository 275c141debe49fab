"""Where a node's work goes and what of its subtree's work never got there: a node's merge
target, its newest landed merge, and the descendants whose work has not reached it.

``node merge`` refuses a node whose subtree holds such work (``lifecycle/merge/facts.py``);
the run loop records the same list when a run ends ``completed`` (``runtime/ends.py``), so
the inbox reads a stored fact instead of asking git on every refresh. Cheap to import:
git and the merges table are loaded only when ``unmerged_below`` or ``landed_merge`` runs.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from fractal.domain.states import Status
from fractal.errors import FractalError, StoreError
from fractal.tree import Tree, parent_of
from fractal.workspace.nodedir import read_config

if TYPE_CHECKING:
    from fractal.store.ledger import Ledger
    from fractal.workspace.merge import LandedMerge

__all__ = ["landed_merge", "merge_target", "refresh_unmerged", "refresh_unmerged_above",
           "unmerged_below"]

_RUNNING = frozenset({Status.ACTIVE, Status.PAUSED})
"""Descendant statuses whose work is counted missing without asking git: its run still
goes, so whatever it will hand over has not reached the node."""


def merge_target(tree: Tree, child: str, into: str | None) -> str:
    """``into``, else the child's configured ``base``, else its dotted parent."""
    if into:
        return into
    try:
        base = read_config(tree.node(child).config_path).get("base")
    except FractalError:
        base = None
    if isinstance(base, str) and base.strip():
        return base.strip()
    return parent_of(child) or tree.root


def landed_merge(tree: Tree, child: str, target: str) -> LandedMerge | None:
    """The child's newest merge into ``target`` that landed (its ``merges`` row settled
    ``merged``), for ``workspace.merge.merge_base``; None when there is none or the
    database cannot be read (the branches alone then decide the base)."""
    from fractal.store.merges import MergeBook  # deferred: start-up cost (17 modules)
    from fractal.workspace.merge import LandedMerge  # deferred: start-up cost (35 modules)

    try:
        rows = MergeBook(tree.db_path).merges_of(child)
    except StoreError:
        return None
    for row in reversed(rows):
        if row.target == target and row.status == "merged" and row.squash_sha:
            return LandedMerge(row.child_sha, row.squash_sha)
    return None


def unmerged_below(tree: Tree, nodes: Iterable[tuple[str, str]], node: str
                   ) -> tuple[str, ...]:
    """``node``'s descendants (``nodes``: every registered (branch, status)) whose work has
    not reached it, by branch name (``domain.merge.rules.unmerged_label``): any still
    running (active or paused: its work is not in yet), any with a hand-back note (the
    merge that lands a handed-back node removes it), and any settled one whose branch
    still holds work its own merge target (its base, else its parent) lacks, as a squash
    merge would compute it. Retired descendants are skipped (dropped on purpose, or merged
    and cleaned up). One ``git merge-tree`` per settled descendant. Raises StoreError (a
    hand-back note unreadable is none)."""
    # deferred: start-up cost: only a merge's check and a run's end compute it (1 module)
    from fractal.domain.merge.rules import unmerged_label
    from fractal.workspace import git  # deferred: start-up cost (5 modules)
    from fractal.workspace import merge as gitmerge  # deferred: start-up cost (35 modules)
    from fractal.workspace.handback import read_note  # deferred: start-up cost (6 modules)

    found: list[str] = []
    for branch, status in sorted(nodes):
        if not branch.startswith(node + ".") or status == Status.RETIRED:
            continue
        target = merge_target(tree, branch, None)
        if status in _RUNNING:
            found.append(unmerged_label(branch, status, handed_back=False, target=target))
            continue
        if read_note(tree.node(branch).node_dir) is not None:
            found.append(unmerged_label(branch, status, handed_back=True, target=target))
            continue
        if not git.branch_exists(tree.repo, branch):
            continue
        try:
            plan = gitmerge.plan_squash(tree.repo, branch, target,
                                        landed_merge(tree, branch, target))
        except FractalError:
            continue  # git cannot tell (a missing target): the merge itself will say
        if plan.conflicts or plan.files:
            found.append(unmerged_label(branch, status, handed_back=False, target=target))
    return tuple(found)


def refresh_unmerged(tree: Tree, ledger: Ledger, target: str, *, actor: str
                     ) -> tuple[str, ...] | None:
    """When ``target`` is settled (neither active nor paused) and its newest ``unmerged``
    event names work (``domain.merge.rules.UNMERGED_EVENT``), book the event again, by
    ``actor``, for the same run, with its subtree's unmerged work as it stands now
    (``unmerged_below``; empty metadata: none left); return the labels booked, or None
    when nothing was to refresh. Runs git only in that case. Raises StoreError, GitError."""
    # deferred: a landing, a run's end or a kill only: start-up cost (1 module)
    from fractal.domain.merge.rules import UNMERGED_EVENT
    from fractal.store.eventlog import last_event  # deferred: start-up cost (1 module)

    if target == tree.root:
        return None
    row = ledger.node(target)
    if row is None or row.status in _RUNNING:
        return None
    event = last_event(tree.db_path, target, UNMERGED_EVENT)
    if event is None or not event.meta:
        return None
    found = unmerged_below(tree, [(r.node, r.status) for r in ledger.nodes()], target)
    ledger.add_event(target, UNMERGED_EVENT, actor=actor, run_id=event.run_id,
                     metadata="; ".join(found))
    return found


def refresh_unmerged_above(tree: Tree, ledger: Ledger, branch: str, *, actor: str) -> None:
    """Once ``branch`` has settled (its run ended, or it was killed): ``refresh_unmerged``
    each ancestor (the root aside) whose newest ``unmerged`` event names ``branch`` still
    running (``domain.merge.rules.unmerged_label``). One events read per ancestor; git
    only for one that names it. Raises StoreError, GitError."""
    # deferred: a run's end or a kill only: start-up cost (1 module)
    from fractal.domain.merge.rules import RUNNING_STATUSES, UNMERGED_EVENT
    from fractal.store.eventlog import last_event  # deferred: start-up cost (1 module)

    running = {f"{branch} ({status}, still running)" for status in RUNNING_STATUSES}
    above = parent_of(branch)
    while above is not None and above != tree.root:
        event = last_event(tree.db_path, above, UNMERGED_EVENT)
        if event is not None and running & set((event.meta or "").split("; ")):
            refresh_unmerged(tree, ledger, above, actor=actor)
        above = parent_of(above)
