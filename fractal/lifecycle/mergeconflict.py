"""The conflict path of ``fractal node merge``: refuse it (exit 1, the target untouched) or
hand it back to the child.

Without ``hand_back`` the conflict is booked (a ``failed`` ``merges`` row, a ``failed``
``merge`` event on the child) and raised as MergeConflict listing the files. With it, the
target's tip is merged into the child's worktree on the squash's base (the markers left
there), the hand-back note written, the conflict booked the same way, the notice posted,
and the child re-armed with ``start --continue`` (not while its parent's run is ending).
A hand-back is refused, with nothing touched, over a child worktree that cannot take it
(none, a merge in progress, uncommitted changes, an earlier hand-back still unresolved).
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from typing import TYPE_CHECKING

from fractal.domain.conflicts import Operation
from fractal.domain.merging import unresolved_hand_back
from fractal.domain.reasons import clip_reason
from fractal.domain.states import Status
from fractal.errors import FractalError
from fractal.lifecycle.mergenotes import notify
from fractal.lifecycle.mergetarget import own_dir_prefix
from fractal.lifecycle.radio import notify_handed_back
from fractal.tree import Tree, parent_of
from fractal.workspace import git
from fractal.workspace import merge as gitmerge
from fractal.workspace.conflict_guard import marker_files, operation_in_progress
from fractal.workspace.handback import HandBack, read_note, write_note

if TYPE_CHECKING:
    from fractal.lifecycle.context import Context, Refused
    from fractal.lifecycle.merge import MergeResult
    from fractal.store.ledger import Ledger
    from fractal.store.merges import MergeBook

__all__ = ["on_conflict"]


def on_conflict(ctx: Context, book: MergeBook, child: str, target: str,
                plan: gitmerge.SquashPlan, actor: str, hand_back: bool,
                notices: list[str], refuse: Callable[[str], Refused]) -> MergeResult:
    """The merge's outcome on a conflict (see the module docstring): a ``handed-back``
    MergeResult, or raises MergeConflict (no hand-back) or the Refused ``refuse`` returns."""
    from fractal.lifecycle.merge import MergeConflict, MergeResult

    tree, ledger = ctx.tree, ctx.ledger
    files = plan.conflicts
    shown = ", ".join(files)
    child_wt = tree.node(child).worktree
    pending = (child_wt.is_dir() and operation_in_progress(child_wt) is Operation.MERGE
               and read_note(tree.node(child).node_dir) is not None)
    if not hand_back:
        reason = clip_reason(f"conflict in {shown}")
        book.book_merge(child=child, target=target, child_sha=plan.child_sha,
                        target_sha=plan.target_sha, squash_sha=None, files=None, actor=actor,
                        status="failed", reason=reason)
        ledger.add_event(child, "merge", actor=actor, status="failed", metadata=reason)
        listed = "\n  ".join(files)
        way = unresolved_hand_back(child, target, str(child_wt)) if pending else (
            f"Resolve it in the child: `fractal node merge {child} --hand-back` hands the "
            f"conflict to {child}'s loop")
        raise MergeConflict(f"{child} conflicts with {target} in {len(files)} file(s); "
                            f"{target} is unchanged:\n  {listed}\n{way}", files)
    if not child_wt.is_dir():
        raise refuse(f"{child} has no worktree to resolve the conflict in; restore it first")
    if pending:
        raise refuse(unresolved_hand_back(child, target, str(child_wt)))
    if operation_in_progress(child_wt) is Operation.MERGE:
        raise refuse(f"{child}'s worktree already has a merge in progress; let it conclude "
                      "it (or `git merge --abort` there) and merge again")
    dirty = [p for p in git.changed_paths(child_wt)
             if not p.startswith(own_dir_prefix(child))]
    if dirty:
        marked = marker_files(child_wt, dirty)
        if marked:  # an interrupted hand-back's files: committing them would keep markers
            raise refuse(f"{child}'s worktree has uncommitted files holding conflict markers "
                         f"({', '.join(marked[:10])}), as an interrupted hand-back leaves "
                         f"them; drop them there with `git checkout -- {shlex.join(marked[:10])}` "
                         "(or resolve and commit them), then merge again")
        raise refuse(f"{child}'s worktree has uncommitted changes ({', '.join(dirty[:10])}); "
                      "commit them there before handing a conflict back")
    left = gitmerge.hand_back_merge(
        child_wt, plan.target_sha, f"{child}: merge {target} ({plan.target_sha[:10]}) to "
        "resolve the conflict", base=plan.base)
    note = HandBack(target, plan.target_sha, tuple(left or files))
    write_note(tree.node(child).node_dir, note)
    reason = clip_reason(f"conflict in {shown}; handed back to {child}")
    book.book_merge(child=child, target=target, child_sha=plan.child_sha,
                    target_sha=plan.target_sha, squash_sha=None, files=None, actor=actor,
                    status="failed", reason=reason)
    ledger.add_event(child, "merge", actor=actor, status="failed", metadata=reason)
    notify(notices, lambda: notify_handed_back(tree, child, target, plan.target_sha,
                                               f"conflict in {shown}"))
    rearmed = False
    ending = _ending(tree, parent_of(child))
    if ending is not None:  # like its siblings, it gets no new run while its parent ends
        notices.append(f"the conflict waits in {child_wt}; {child} was not re-armed: its "
                       f"parent's run is ending ({ending} pending); start it with "
                       f"`fractal node start {child} --continue`")
        return MergeResult(child, target, "handed-back", conflicts=note.files,
                           rearmed=False, notices=tuple(notices))
    try:
        from fractal.lifecycle.start import start_node

        start_node(ctx, child, continue_mode=True)
        rearmed = True
    except FractalError as exc:
        notices.append(f"the conflict waits in {child_wt}, but {child} could not be re-armed: "
                       f"{exc}; {_rearm_hint(ctx.ledger, child)}")
    return MergeResult(child, target, "handed-back", conflicts=note.files, rearmed=rearmed,
                       notices=tuple(notices))


def _rearm_hint(ledger: Ledger, child: str) -> str:
    """The command that gives ``child`` a run to resolve a handed-back conflict in: a
    node that never ran is started, a parked one resumed, a settled one continued."""
    row = ledger.node(child)
    verb = {Status.IDLE: "start", Status.PAUSED: "resume"}.get(row.status) if row else None
    command = f"{verb} {child}" if verb else f"start {child} --continue"
    return f"run `fractal node {command}`"


def _ending(tree: Tree, parent: str | None) -> str | None:
    """The stop, finish or kill pending on ``parent``'s open run (its run is ending and
    its children are being wound down with it), or None."""
    from fractal.store import reader

    if parent is None or parent == tree.root:
        return None
    pending = reader.pending_signals(tree.db_path, parent)
    return next((s for s in ("kill", "stop", "finish") if s in pending), None)
