"""``fractal node merge``: squash a settled child's work into its target, or hand a conflict
back to the child.

The target is ``--into``, else the child's ``base`` (config), else its dotted parent (the
root branch for a top-level node); the merge happens in the target's worktree (the main
checkout for the root). Who may merge and when it is refused are the pure rules of
``domain.merge.rules``, on the facts ``lifecycle.merge.facts`` reads; a refusal is recorded as a ``failed`` ``merge`` event on the child,
and a node's refused merge of its child into itself also where an operator looks later
(``lifecycle.merge.notes``: its agent met it inside a step, which goes on).

First the child's private git objects are adopted into the shared store and its branch
checked whole there (``lifecycle.adopting``): every git of the merge reads the shared store
alone, so a branch that needs an object adoption refused is a refusal, never a target that
needs it. Then, holding the target worktree's commit turn (so no commit or backstop runs
there meanwhile): finish or roll back a merge into the same target that was interrupted (its
``merges`` row is still ``active``); compute the squash without touching any worktree
(``workspace.merge.plan_squash``); on a conflict, record it and either exit 1 listing the
files (the target was never touched) or, with ``hand_back``, merge the target's tip into the
child's worktree leaving the markers there, write the hand-back note and re-arm the child
with ``start --continue`` (``_on_conflict``); otherwise write the squash commit, book the
``merges`` row ``active``, fast-forward the target to it, settle the row ``merged`` once the
target's branch contains it, record the ``merge`` event and advance the child's merge base
so a later merge brings only new work. An interruption at any point leaves the target either
untouched or fully merged; the next merge into it settles the row
(``lifecycle.merge.landing``: the landing and its recovery).
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from fractal.domain.merge.conflicts import Operation
from fractal.domain.merge.rules import (
    BODY_SUBJECTS,
    authorisation_refusal,
    merge_body,
    merge_refusal,
    merge_subject,
    unresolved_hand_back,
)
from fractal.domain.run.reasons import REASON_LIMIT, clip_reason
from fractal.domain.states import Status
from fractal.errors import FractalError
from fractal.lifecycle.adopting import take_objects
from fractal.lifecycle.context import Context, Refused
from fractal.lifecycle.merge.facts import merge_facts
from fractal.lifecycle.merge.landing import recover_interrupted, settle_landed, settle_nothing_new
from fractal.lifecycle.merge.notes import notify, record_refusal
from fractal.lifecycle.merge.target import landed_merge, merge_target, own_dir_prefix, resolve_child
from fractal.lifecycle.radio import notify_handed_back, notify_merged
from fractal.store import reader
from fractal.store.ledger import Ledger
from fractal.store.merges import MergeBook
from fractal.tree import Tree, parent_of
from fractal.workspace import git
from fractal.workspace import merge as gitmerge
from fractal.workspace.commit_lock import commit_turn
from fractal.workspace.conflict_guard import marker_files, operation_in_progress
from fractal.workspace.handback import HandBack, read_note, write_note
from fractal.workspace.nodedir import read_config

__all__ = ["MergeConflict", "MergeResult", "merge_node", "merge_then_clean", "outcome_line"]


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


def outcome_line(result: MergeResult) -> str | None:
    """What the front ends say of a merge that ``merged`` (``merged CHILD into TARGET:
    SHA10 (N file(s))``) or ``handed-back`` (the child, whether it was re-armed, the
    conflicting files); None for ``nothing`` (its first notice says so). ``fractal node
    merge`` prints it on stderr; the dashboard notifies it with the notices."""
    if result.status == "merged" and result.squash_sha:
        return (f"merged {result.child} into {result.target}: {result.squash_sha[:10]} "
                f"({result.files} file(s))")
    if result.status == "handed-back":
        state = "re-armed to resolve them" if result.rearmed else "not re-armed"
        return (f"handed the conflict back to {result.child} ({state}); conflicting "
                f"file(s): {', '.join(result.conflicts)}")
    return None


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
    row = ledger.node(child)
    taken = take_objects(tree, child, None if row is None else row.status, "merge",
                         besides=f"refs/heads/{target}"
                         if git.branch_exists(tree.repo, target) else None)
    if taken.refusal:
        raise refuse(taken.refusal)
    if not git.branch_exists(tree.repo, child):
        raise refuse(f"{child}'s branch does not exist; nothing to merge")
    target_wt = _target_worktree(tree, target)
    why = merge_refusal(merge_facts(ctx, child, target, target_wt, force))
    if why is not None:
        raise refuse(why)
    book = MergeBook(tree.db_path)
    with commit_turn(target_wt):
        notices = list(recover_interrupted(tree, book, ledger, target, target_wt))
        landed = landed_merge(tree, child, target)
        plan = gitmerge.plan_squash(target_wt, child, target, landed)
        if plan.conflicts:
            return _on_conflict(ctx, book, child, target, plan, actor, hand_back,
                                notices, refuse)
        if not plan.files:
            notices.append(f"nothing new to merge: {target} already holds all of {child}'s "
                           "work")
            settle_nothing_new(book, plan, child, target, actor)
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
        notices.extend(settle_landed(tree, book, ledger, merge_id, child, target,
                                     plan.child_sha, squash, len(plan.files), actor))
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
    # deferred: only a merge that lands (1 module)
    from fractal.workspace.mergecontent import plan_content

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
        from fractal.lifecycle.cleanup.retire import retire  # deferred: start-up cost (11 modules)

        retire(ctx, result.child, reason=f"merged into {result.target}")
        done = f"retired {result.child}"
    elif then == "delete":
        from fractal.lifecycle.cleanup.delete import delete  # deferred: start-up cost (14 modules)

        removed = delete(ctx, result.child)
        done = "deleted " + ", ".join(d.branch for d in removed)
    else:
        raise FractalError(f"unknown clean-up {then!r} after a merge: use retire or delete")
    return MergeResult(result.child, result.target, result.status, result.squash_sha,
                       result.files, result.conflicts, result.rearmed,
                       (*result.notices, done))


def _on_conflict(ctx: Context, book: MergeBook, child: str, target: str,
                plan: gitmerge.SquashPlan, actor: str, hand_back: bool,
                notices: list[str], refuse: Callable[[str], Refused]) -> MergeResult:
    """The merge's outcome on a conflict: without ``hand_back``, the conflict is booked (a
    ``failed`` ``merges`` row, a ``failed`` ``merge`` event on the child) and raised as
    MergeConflict listing the files. With it, the target's tip is merged into the child's
    worktree on the squash's base (the markers left there), the hand-back note written,
    the conflict booked the same way, the notice posted, and the child re-armed with
    ``start --continue`` (not while its parent's run is ending): a ``handed-back``
    MergeResult. A hand-back is refused (the Refused ``refuse`` returns), with nothing
    touched, over a child worktree that cannot take it (none, a merge in progress,
    uncommitted changes, an earlier hand-back still unresolved)."""
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
        from fractal.lifecycle.start.node import start_node  # deferred: start-up cost (35 modules)

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

    if parent is None or parent == tree.root:
        return None
    pending = reader.pending_signals(tree.db_path, parent)
    return next((s for s in ("kill", "stop", "finish") if s in pending), None)
