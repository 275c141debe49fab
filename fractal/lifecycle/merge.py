"""``fractal node merge``: squash a settled child's work into its target, or hand a conflict
back to the child.

The target is ``--into``, else the child's ``base`` (config), else its dotted parent (the
root branch for a top-level node); the merge happens in the target's worktree (the main
checkout for the root). Who may merge and when it is refused are the pure rules of
``domain.merging``; a refusal is recorded as a ``failed`` ``merge`` event on the child,
and a node's refused merge of its child into itself also where an operator looks later
(``lifecycle.mergenotes``: its agent met it inside a step, which goes on).

In order, holding the target worktree's commit turn (so no commit or backstop runs there
meanwhile): finish or roll back a merge into the same target that was interrupted (its
``merges`` row is still ``active``); compute the squash without touching any worktree
(``workspace.merge.plan_squash``); on a conflict, record it and either exit 1 listing the
files (the target was never touched) or, with ``hand_back``, merge the target's tip into
the child's worktree leaving the markers there, write the hand-back note and re-arm the
child with ``start --continue`` (``lifecycle.mergeconflict``); otherwise write the squash
commit, book the ``merges`` row ``active``, fast-forward the target to it, settle the row
``merged`` once the target's branch contains it, record the ``merge`` event and advance
the child's merge base so a later merge brings only new work. An interruption at any point leaves the target either
untouched or fully merged; the next merge into it settles the row.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fractal.domain.merging import (
    BODY_SUBJECTS,
    MergeFacts,
    authorisation_refusal,
    merge_body,
    merge_refusal,
    merge_subject,
)
from fractal.domain.reasons import REASON_LIMIT, clip_reason
from fractal.domain.states import Status
from fractal.errors import FractalError
from fractal.lifecycle.context import Context, Refused
from fractal.lifecycle.mergeconflict import on_conflict
from fractal.lifecycle.mergenotes import notify, record_refusal
from fractal.lifecycle.mergetarget import landed_merge, merge_target, own_dir_prefix, resolve_child
from fractal.lifecycle.radio import notify_merged
from fractal.store.ledger import Ledger
from fractal.store.merges import MergeBook
from fractal.tree import Tree, parent_of
from fractal.workspace import git
from fractal.workspace import merge as gitmerge
from fractal.workspace.commit_lock import clear_index_lock, commit_turn
from fractal.workspace.conflict_guard import operation_in_progress, unmerged_paths
from fractal.workspace.handback import clear_note, read_note
from fractal.workspace.nodedir import read_config

__all__ = ["MergeConflict", "MergeResult", "merge_node", "merge_then_clean"]


class MergeConflict(FractalError):
    """The child's work conflicts with its target; nothing changed. ``files`` lists them."""

    def __init__(self, message: str, files: tuple[str, ...]) -> None:
        self.files = files
        super().__init__(message)


@dataclass(frozen=True)
class MergeResult:
    """What a merge did.

    ``status`` is ``merged`` (``squash_sha`` landed on ``target``), ``nothing`` (the target
    already holds all of the child's work) or ``handed-back`` (``conflicts`` now sit in the
    child's worktree; ``rearmed`` tells whether its new run started). ``notices`` are
    for stderr.
    """

    child: str
    target: str
    status: str
    squash_sha: str | None = None
    files: int = 0
    conflicts: tuple[str, ...] = ()
    rearmed: bool = False
    notices: tuple[str, ...] = ()


def _target_worktree(tree: Tree, target: str) -> Path:
    if tree.owns(target):
        path = tree.worktree_of(target)
        if path.is_dir():
            return path
    found = gitmerge.worktree_of_branch(tree.repo, target)
    if found is None and not git.branch_exists(tree.repo, target):
        raise FractalError(f"branch {target} does not exist; name an existing branch with "
                           "--into (`git branch` lists them), or leave --into out to merge "
                           "into the node's base or parent")
    if found is None:
        raise FractalError(f"branch {target} is checked out in no worktree; a merge lands in "
                           f"the target's worktree: check it out (`git worktree add PATH "
                           f"{target}`) or merge into another branch with --into")
    return found


def _facts(ctx: Context, child: str, target: str, target_wt: Path,
           force: bool) -> MergeFacts:
    tree, ledger = ctx.tree, ctx.ledger
    row = ledger.node(child)
    target_row = ledger.node(target) if target != tree.root else None
    last = ledger.last_run(child)
    gate = None
    if last is not None and last.ended_at is not None:
        waiting = [s for s in ledger.pending_approvals(child) if s.run_id == last.run_id]
        gate = waiting[-1].step_name if waiting else None
    dirty = [p for p in git.tracked_changes(target_wt)
             if not p.startswith(own_dir_prefix(target))]
    operation = operation_in_progress(target_wt)
    return MergeFacts(
        child=child, target=target, child_status=row.status if row else "unregistered",
        target_status=target_row.status if target_row else None,
        last_run_status=last.status if last else None, unapproved_gate=gate,
        target_dirty=tuple(dirty), target_operation=operation.value if operation else None,
        caller_is_target_loop=ctx.loop_branch == target, force=force,
        budget_landing=last is not None and last.status is Status.EXITED
        and last.exit_code == 0,
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


def _title(tree: Tree, ledger: Ledger, child: str) -> str | None:
    row = ledger.node(child)
    if row is not None and row.title:
        return row.title
    try:
        title = read_config(tree.node(child).config_path).get("title")
    except FractalError:
        return None
    return title if isinstance(title, str) else None


def merge_node(ctx: Context, name: str | None, *, into: str | None = None,
               hand_back: bool = False, force: bool = False) -> MergeResult:
    """Merge node ``name`` into its target (see the module docstring).

    Raises Refused (not allowed, or a refusal rule; recorded as a failed ``merge`` event),
    MergeConflict (exit 1, the target untouched), FractalError, GitError.
    """
    tree = ctx.tree
    child = resolve_child(ctx, name)
    ledger = ctx.ledger
    ctx.check_claim("merge", child)
    caller, actor = ctx.acting, ctx.actor
    target = merge_target(tree, child, into)

    authorised = False  # past the authority check, a node's refused merge (its agent's, in
    # a step that goes on) is also recorded where an operator looks (``mergenotes``)

    def refuse(why: str) -> Refused:
        refused = ctx.refuse("merge", child, why, limit=REASON_LIMIT)
        if authorised and not ctx.is_operator:
            record_refusal(ctx, child, target, why)
        return refused

    why = authorisation_refusal(caller=caller, root=tree.root, child=child,
                                child_parent=parent_of(child), target=target)
    if why is not None:
        raise refuse(why)
    authorised = True
    if target == child or target.startswith(child + "."):
        raise refuse(f"{child} cannot be merged into {target}, which is itself or one of its "
                     "own descendants")
    if not git.branch_exists(tree.repo, child):
        raise refuse(f"{child}'s branch does not exist; nothing to merge")
    target_wt = _target_worktree(tree, target)
    why = merge_refusal(_facts(ctx, child, target, target_wt, force))
    if why is not None:
        raise refuse(why)
    book = MergeBook(tree.db_path)
    with commit_turn(target_wt):
        notices = list(_recover(tree, book, ledger, target, target_wt))
        landed = landed_merge(tree, child, target)
        plan = gitmerge.plan_squash(target_wt, child, target, landed)
        if plan.conflicts:
            return on_conflict(ctx, book, child, target, plan, actor, hand_back,
                               notices, refuse)
        if not plan.files:
            notices.append(f"nothing new to merge: {target} already holds all of {child}'s "
                           "work")
            _settle_outstanding(book, plan, child, target, actor)
            notices.extend(_left_behind(tree, child))
            return MergeResult(child, target, "nothing", notices=tuple(notices))
        subjects = gitmerge.subjects_since_merge(target_wt, plan.child_sha, plan.target_sha,
                                                 BODY_SUBJECTS, base=plan.base, landed=landed)
        message = merge_subject(target, child, _title(tree, ledger, child)) + "\n\n" + \
            merge_body(subjects, gitmerge.diffstat_lines(target_wt, plan.target_sha,
                                                         plan.tree or ""))
        why = _content_refusal(target_wt, plan, child, force)
        if why is not None:
            raise refuse(why)
        in_the_way = gitmerge.untracked_in_the_way(target_wt, plan.files)
        if in_the_way:
            raise refuse(f"untracked file(s) in {target}'s worktree would be overwritten by "
                         f"the merge: {', '.join(in_the_way[:10])}; move them away and merge "
                         "again")
        squash = gitmerge.write_squash_commit(target_wt, plan, message)
        merge_id = book.book_merge(child=child, target=target, child_sha=plan.child_sha,
                                   target_sha=plan.target_sha, squash_sha=squash,
                                   files=len(plan.files), actor=actor)
        try:
            gitmerge.fast_forward(target_wt, squash)
        except FractalError as exc:
            if not gitmerge.contains(target_wt, target, squash):
                book.settle_merge(merge_id, "failed", clip_reason(str(exc)))
                raise refuse(f"git refused to update {target}'s worktree, which is unchanged: "
                             f"{exc}") from exc
        notices.extend(_settle(tree, book, ledger, merge_id, child, target, plan.child_sha,
                               squash, len(plan.files), actor))
    notices.extend(_left_behind(tree, child))
    notify(notices, lambda: notify_merged(tree, child, target, squash,
                                          f"{len(plan.files)} file(s)"))
    return MergeResult(child, target, "merged", squash, len(plan.files),
                       notices=tuple(notices))


def _content_refusal(target_wt: Path, plan: gitmerge.SquashPlan, child: str,
                     force: bool) -> str | None:
    """Why the squash must not land (``workspace.mergecontent``): conflict-marker lines
    the child's work adds, or nested repositories committed as gitlinks; None with
    ``force`` (the lines are meant to be there) or when there is neither."""
    if force or plan.tree is None:
        return None
    from fractal.workspace.mergecontent import plan_content  # only a merge that lands

    found = plan_content(target_wt, plan.target_sha, plan.tree, plan.files)
    if found.markers:
        return (f"{child}'s work adds conflict-marker lines (<<<<<<< ======= >>>>>>>) to "
                f"{', '.join(found.markers[:10])}: a conflict committed unresolved; resolve "
                f"them on {child} (edit, commit) and merge again, or pass --force if the "
                "lines are meant to be there (a git tutorial, a merge-tool fixture)")
    if found.gitlinks:
        return (f"{child}'s work commits {', '.join(found.gitlinks[:10])} as a gitlink (a "
                "nested repository's bare pointer, none of its files): remove its `.git`, "
                "`git rm --cached` it and commit its files on the child, or register it as "
                "a submodule and pass --force")
    return None


def _settle_outstanding(book: MergeBook, plan: gitmerge.SquashPlan, child: str, target: str,
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


def _left_behind(tree: Tree, child: str) -> list[str]:
    """The notice naming the project files the child's worktree holds uncommitted (its
    node directory aside), which no merge brings: empty when none or no worktree."""
    child_wt = tree.node(child).worktree
    left = [p for p in git.changed_paths(child_wt)
            if not p.startswith(own_dir_prefix(child))] if child_wt.is_dir() else []
    if not left:
        return []
    return [f"{child} has {len(left)} uncommitted file(s) that did not travel "
            f"({', '.join(left[:5])}); commit them there and merge again"]


def _settle(tree: Tree, book: MergeBook, ledger: Ledger, merge_id: int, child: str,
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
    return notices


def _recover(tree: Tree, book: MergeBook, ledger: Ledger, target: str,
             target_wt: Path) -> list[str]:
    """Settle merges into ``target`` that an interruption left ``active``: finish one whose
    squash is on the branch, roll back the files of one that never got there."""
    notices: list[str] = []
    for row in book.active_merges(target):
        squash = row.squash_sha
        if squash and gitmerge.contains(target_wt, target, squash):
            notices.extend(_settle(tree, book, ledger, row.merge_id, row.child, target,
                                   row.child_sha, squash, row.files or 0, row.actor or "",
                                   " (finished after an interruption)"))
            notices.append(f"finished the interrupted merge of {row.child} into {target}")
            continue
        restored: list[str] = []
        if squash and git.head_sha(target_wt) == row.target_sha:
            clear_index_lock(target_wt)
            if git.changed_paths(target_wt):  # save what the roll-back may overwrite
                from fractal.domain.cleanup import Cleanup
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


def merge_then_clean(ctx: Context, name: str | None, *, into: str | None = None,
                     hand_back: bool = False, force: bool = False,
                     then: str | None = None) -> MergeResult:
    """``merge_node``, then, once the target holds all of the child's work (``merged`` or
    ``nothing``), ``then`` = ``retire`` (reason ``merged into <target>``) or ``delete``
    the child and its subtree; their refusals are raised as they are (the merge stands).
    """
    result = merge_node(ctx, name, into=into, hand_back=hand_back, force=force)
    if then is None or result.status not in ("merged", "nothing"):
        return result
    if then == "retire":
        from fractal.lifecycle.retire import retire

        retire(ctx, result.child, reason=f"merged into {result.target}")
        done = f"retired {result.child}"
    elif then == "delete":
        from fractal.lifecycle.delete import delete

        removed = delete(ctx, result.child)
        done = "deleted " + ", ".join(d.branch for d in removed)
    else:
        raise FractalError(f"unknown clean-up {then!r} after a merge: use retire or delete")
    return MergeResult(result.child, result.target, result.status, result.squash_sha,
                       result.files, result.conflicts, result.rearmed,
                       (*result.notices, done))
