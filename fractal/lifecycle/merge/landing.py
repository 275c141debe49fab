"""A merge's landing and its recovery: how a squash that reached the target is recorded,
and how the next merge into a target settles one an interruption left half-way.

``fractal node merge`` books its ``merges`` row ``active`` before it moves the target
(``lifecycle.merge.squash``). ``settle_landed`` records the landing once the target's branch holds
the squash: the row ``merged``, the ``merge`` event, the child's merge base advanced, its
hand-back note removed. Any merge into the same target first runs
``recover_interrupted``, under the target worktree's commit turn: a row still ``active``
whose squash is on the branch is settled as landed; one whose squash never got there has
its files rolled back (the worktree saved on a rescue ref first when it holds changes)
and is settled ``failed``. So an interruption at any point leaves the target untouched
or fully merged. A merge that finds nothing new to bring settles what an earlier
failed merge into the same target left outstanding (``settle_nothing_new``). A landing
in a settled node whose run's end booked subtree work never merged books that work again
as it now stands (``workspace.subtree.refresh_unmerged``), so the inbox's "work missing"
item goes once the last of it is in.
"""

from __future__ import annotations

from pathlib import Path

from fractal.domain.run.reasons import clip_reason
from fractal.store.ledger import Ledger
from fractal.store.merges import MergeBook
from fractal.tree import Tree
from fractal.workspace import git
from fractal.workspace import merge as gitmerge
from fractal.workspace.commit_lock import clear_index_lock
from fractal.workspace.handback import clear_note
from fractal.workspace.subtree import refresh_unmerged

__all__ = ["recover_interrupted", "settle_landed", "settle_nothing_new"]


def settle_landed(tree: Tree, book: MergeBook, ledger: Ledger, merge_id: int, child: str,
            target: str, child_sha: str, squash: str, files: int, actor: str,
            how: str = "") -> list[str]:
    """Record a landed squash: the row ``merged`` (only if the branch holds it), the event,
    the child's merge base advanced, its hand-back note removed."""
    notices: list[str] = []
    if not gitmerge.contains(tree.repo, target, squash):
        return notices
    book.settle_merge(merge_id, "merged", how)
    ledger.add_event(child, "merge", actor=actor, status="completed",
                     metadata=clip_reason(f"into {target}: {squash} ({files} file(s)){how}"))
    advanced = gitmerge.advance_base(tree.repo, child, child_sha, squash,
                                     gitmerge.advance_subject(child, target, squash))
    if advanced is None and not gitmerge.contains(tree.repo, child, squash):
        notices.append(f"{child} moved during the merge; its new commits come with the next "
                       "merge")
    clear_note(tree.node(child).node_dir)
    refresh_unmerged(tree, ledger, target, actor="merge")
    return notices


def recover_interrupted(tree: Tree, book: MergeBook, ledger: Ledger, target: str,
             target_wt: Path) -> list[str]:
    """Settle merges into ``target`` that an interruption left ``active``: finish one whose
    squash is on the branch, roll back the files of one that never got there."""
    notices: list[str] = []
    for row in book.active_merges(target):
        squash = row.squash_sha
        if squash and gitmerge.contains(target_wt, target, squash):
            notices.extend(settle_landed(tree, book, ledger, row.merge_id, row.child, target,
                                         row.child_sha, squash, row.files or 0,
                                         row.actor or "", " (finished after an interruption)"))
            notices.append(f"finished the interrupted merge of {row.child} into {target}")
            continue
        restored: list[str] = []
        if squash and git.head_sha(target_wt) == row.target_sha:
            clear_index_lock(target_wt)
            if git.changed_paths(target_wt):  # save what the roll-back may overwrite
                from fractal.domain.cleanup import Cleanup  # deferred: start-up cost (1 module)

                # deferred: start-up cost (2 modules)
                from fractal.lifecycle.rescuing import rescue_node

                saved = rescue_node(tree, target, Cleanup.MERGE_RESTORE.value,
                                    actor=row.actor or "operator", worktree=target_wt)
                notices.append(f"saved {target}'s worktree on {saved.ref} before the "
                               "roll-back")
            restored = gitmerge.roll_back(target_wt, row.target_sha, squash)
        book.settle_merge(row.merge_id, "failed",
                          f"interrupted before {target} moved; {len(restored)} file(s) "
                          "restored")
        notices.append(f"an interrupted merge of {row.child} into {target} was rolled back "
                       f"({len(restored)} file(s) restored)")
    return notices


def settle_nothing_new(book: MergeBook, plan: gitmerge.SquashPlan, child: str, target: str,
                        actor: str) -> None:
    """Book a ``merged`` row with no squash (the target holds all of ``child``'s work)
    when its newest merge into ``target`` did not land (a conflict handed back and since
    resolved to nothing new, a refusal): what the inbox's ``merge`` item and the status
    detail read settles with it. Nothing is booked when nothing is outstanding."""
    newest = next((r for r in reversed(book.merges_of(child)) if r.target == target), None)
    if newest is not None and newest.status == "failed":
        book.book_merge(child=child, target=target, child_sha=plan.child_sha,
                        target_sha=plan.target_sha, squash_sha=None, files=0, actor=actor,
                        status="merged", reason=f"nothing new: {target} already held all "
                        "of it")
