"""``fractal node retire`` / ``unretire``: hide a finished subtree, and bring it back.

Retiring removes each node's worktree but keeps its branch and every row; the status
becomes ``retired`` and the ``retire`` event records the status it had (``was
completed``), which ``unretire`` restores after checking the branch out again. The whole
subtree goes (deepest first) or nothing does: every node is checked before any is
touched, under the tree lock that starts and spawns take too.
"""

from __future__ import annotations

from dataclasses import dataclass

from fractal.domain.cleanup import (
    Cleanup,
    deepest_first,
    previous_status,
    restored_status,
    retire_note,
    retire_refusal,
    unretire_refusal,
)
from fractal.domain.run.reasons import clip_reason
from fractal.domain.states import Move, Status
from fractal.errors import FractalError
from fractal.lifecycle.caps import check_caps
from fractal.lifecycle.cleanup.targets import facts_of, inside, node_named, subtree_rows
from fractal.lifecycle.context import Context
from fractal.lifecycle.rescuing import rescue_node
from fractal.store.transition import EventNote
from fractal.workspace.nodedir import file_lock
from fractal.workspace.rescue import held_history
from fractal.workspace.teardown import drop_worktree, restore_worktree
from fractal.workspace.worktrees import set_identity

__all__ = ["Retired", "retire", "unretire"]


@dataclass(frozen=True)
class Retired:
    """One node retired or unretired: its status before and after, and the rescue ref
    written for its unsaved files (``None`` when there was nothing to save)."""

    branch: str
    before: str
    after: str
    rescue_ref: str | None = None
    note: str = ""
    """Why a descendant stayed retired (an ancestor's spawn cap), else empty."""


def retire(ctx: Context, name: str, *, reason: str | None = None,
           force: bool = False) -> list[Retired]:
    """Retire node ``name`` and its descendants not retired yet; return them deepest first.

    Refused (recorded as a failed ``retire`` event) when the caller is neither the operator
    nor an ancestor, when any node of the subtree is live or missing, when the caller's
    directory is inside one of the worktrees, when a worktree has uncommitted files
    unless ``force`` (each such worktree is saved on a rescue ref first), and, even with
    ``force``, when a worktree holds a committed gitlink whose directory is a repository
    of its own (``rescue.held_history``: its history would exist nowhere). Raises
    Refused, GitError.
    """
    tree, ledger = ctx.tree, ctx.ledger
    note = clip_reason(reason) if reason else None
    with file_lock(tree.lock_path):
        branch = node_named(ctx, name)
        ctx.authorize("retire", branch)
        rows = subtree_rows(ledger, branch)
        named = next(r for r in rows if r.node == branch)
        members = [named, *[r for r in rows if r.node != branch
                            and r.status != Status.RETIRED.value]]
        facts = {r.node: facts_of(tree, r) for r in members}
        for member in members:
            why = retire_refusal(facts[member.node], force=force)
            if why is None and facts[member.node].worktree_exists:  # even forced, even clean
                why = held_history(tree.worktree_of(member.node))
            if why is None and inside(ctx.cwd, tree.worktree_of(member.node)):
                why = (f"the current directory is inside {member.node}'s worktree; run the "
                       "command from elsewhere (e.g. the repository root)")
            if why:
                raise ctx.refuse("retire", member.node, why)
        done: list[Retired] = []
        for node in deepest_first(facts):
            fact = facts[node]
            ref = None
            if fact.dirty:
                ref = rescue_node(tree, node, Cleanup.RETIRE.value, actor=ctx.actor).ref
            moved = ledger.move(node, Move.RETIRE, event=EventNote(
                "retire", actor=ctx.actor, metadata=retire_note(fact.status, note)))
            if not moved.ok:  # it changed status since the check (e.g. a start got in)
                raise ctx.refuse("retire", node, moved.why)
            drop_worktree(tree.repo, tree.worktree_of(node))
            done.append(Retired(node, fact.status, Status.RETIRED.value, ref))
        return done


def unretire(ctx: Context, name: str) -> list[Retired]:
    """Bring retired node ``name`` back, with its retired descendants, shallowest first:
    each worktree is checked out again from its branch and the status recorded at retire
    time is restored (``idle`` when none was). A node restored ``idle`` takes a spawn slot
    back, so its ancestors' caps are checked first; a descendant they refuse stays
    retired (its ``note`` says why). Refused (recorded) when the caller may not act on
    it, it is not retired, its branch is gone, or (idle) a cap refuses it. Raises
    Refused, GitError."""
    from fractal.store.eventlog import last_event  # deferred: start-up cost (2 modules)

    tree, ledger = ctx.tree, ctx.ledger
    with file_lock(tree.lock_path):
        branch = node_named(ctx, name)
        ctx.authorize("unretire", branch)
        rows = subtree_rows(ledger, branch)
        members = [r for r in rows if r.node == branch or r.status == Status.RETIRED.value]
        facts = {r.node: facts_of(tree, r) for r in members}
        why = unretire_refusal(facts[branch])
        if why:
            raise ctx.refuse("unretire", branch, why)
        done: list[Retired] = []
        for member in members:
            fact = facts[member.node]
            if unretire_refusal(fact):
                continue  # a descendant whose branch is gone stays retired (and missing)
            event = last_event(tree.db_path, member.node, "retire", "completed")
            status = restored_status(previous_status(event.meta) if event else None)
            if status == Status.IDLE:  # an idle node takes a spawn slot back: caps apply
                try:
                    check_caps(tree, ledger, member.node)
                except FractalError as exc:
                    if member.node == branch:
                        raise ctx.refuse("unretire", branch, str(exc)) from None
                    done.append(Retired(member.node, Status.RETIRED.value,
                                        Status.RETIRED.value, note=str(exc)))
                    continue
            worktree = tree.worktree_of(member.node)
            if not fact.worktree_exists:
                restore_worktree(tree.repo, worktree, member.node)
            set_identity(worktree, member.node)
            moved = ledger.move(member.node, Move.UNRETIRE, to=Status(status),
                                event=EventNote("unretire", actor=ctx.actor,
                                                metadata=f"restored {status}"))
            if not moved.ok:
                raise ctx.refuse("unretire", member.node, moved.why)
            done.append(Retired(member.node, Status.RETIRED.value, status))
        return done
