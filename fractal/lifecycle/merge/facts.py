"""The facts ``fractal node merge`` is refused on (``domain.merge.rules.MergeFacts``), read
from the registry, the node files and git: the child's last run and a gate it left
unapproved, the target worktree's state, a conflict handed back, and the work of the
child's subtree that never reached the child."""

from __future__ import annotations

from pathlib import Path

from fractal.domain.gates import unapproved_gate
from fractal.domain.merge.rules import MergeFacts
from fractal.domain.states import SETTLED, Status
from fractal.lifecycle.context import Context
from fractal.lifecycle.merge.target import own_dir_prefix
from fractal.tree import Tree
from fractal.workspace import git
from fractal.workspace import merge as gitmerge
from fractal.workspace.conflict_guard import operation_in_progress, unmerged_paths
from fractal.workspace.handback import read_note
from fractal.workspace.subtree import unmerged_below

__all__ = ["merge_facts"]


def merge_facts(ctx: Context, child: str, target: str, target_wt: Path,
                force: bool) -> MergeFacts:
    """What ``domain.merge.rules.merge_refusal`` decides a merge of ``child`` into ``target``
    (its worktree ``target_wt``) on: the registry, the child's last run and its gate, the
    target worktree's state, the hand-back, and (unless ``force``) the subtree's unmerged
    work. The last run counts as ended once its rows close, or once the node is settled
    while they are still open (a kill's window): it ended then with the node's status, and
    a gate it left waiting or never reached refuses the merge. Raises StoreError, GitError."""
    tree, ledger = ctx.tree, ctx.ledger
    row = ledger.node(child)
    target_row = ledger.node(target) if target != tree.root else None
    last = ledger.last_run(child)
    last_status = last.status if last is not None else None
    ended = last is not None and last.ended_at is not None
    # A kill records the node ``killed`` before it closes the run's rows (once the run's
    # processes are gone): a settled node's open run has ended, as the node did.
    if last is not None and not ended and row is not None and row.status in SETTLED:
        ended, last_status = True, row.status
    gate = None
    if last is not None and ended:
        waiting = [s for s in ledger.pending_approvals(child) if s.run_id == last.run_id]
        gate = waiting[-1].step_name if waiting else unapproved_gate(  # a gate of its start
            ledger.run_gates(child, last.run_id), ledger.approved_steps(last.run_id))
    dirty = [p for p in git.tracked_changes(target_wt)
             if not p.startswith(own_dir_prefix(target))]
    operation = operation_in_progress(target_wt)
    return MergeFacts(
        child=child, target=target, child_status=row.status if row else "unregistered",
        target_status=target_row.status if target_row else None,
        last_run_status=last_status, unapproved_gate=gate,
        target_dirty=tuple(dirty), target_operation=operation.value if operation else None,
        caller_is_target_loop=ctx.loop_branch == target, force=force,
        budget_landing=last is not None and last.status is Status.EXITED
        and last.exit_code == 0,
        unmerged_below=() if force else unmerged_below(
            tree, [(r.node, r.status) for r in ledger.nodes()], child),
        **_hand_back_facts(tree, child))


def _hand_back_facts(tree: Tree, child: str) -> dict[str, bool]:
    """``handed_back`` / ``hand_back_resolved`` of ``MergeFacts``: whether the conflict a
    hand-back left in ``child`` is still there (its branch lacks the target's tip the
    hand-back brought, or its worktree still has the merge in progress or unmerged paths)
    or was concluded since (resolved and committed, by its loop or by hand)."""
    note = read_note(tree.node(child).node_dir)
    if note is None:
        return {"handed_back": False, "hand_back_resolved": False}
    child_wt = tree.node(child).worktree
    concluded = bool(note.target_sha) and gitmerge.contains(tree.repo, child, note.target_sha)
    if concluded and child_wt.is_dir():
        concluded = operation_in_progress(child_wt) is None and not unmerged_paths(child_wt)
    return {"handed_back": not concluded, "hand_back_resolved": concluded}
