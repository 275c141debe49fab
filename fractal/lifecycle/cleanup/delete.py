"""``fractal node delete``: tear a subtree down, deepest first, keeping its history.

For each node, children before parents: a rescue ref of the branch and its unsaved files
(always: a squash-merged branch's own commits exist nowhere else), then the worktree, the
branch and the registry row go. History rows (runs, steps, events, messages, rescues)
stay, so spend still counts and ``cost breakdown`` lists ``<branch> (deleted)``; the name
is free for a new ``fractal node init``. Every node is checked before any is touched: a
live node refuses the whole delete, and work not merged into a node's target or not
committed refuses it unless ``--force``.
"""

from __future__ import annotations

from dataclasses import dataclass

from fractal.control import heal_lock_path
from fractal.domain.cleanup import Cleanup, deepest_first, delete_refusal, is_missing
from fractal.lifecycle.cleanup.targets import facts_of, inside, node_named, subtree_rows
from fractal.lifecycle.context import Context
from fractal.lifecycle.rescuing import rescue_node
from fractal.lifecycle.steering.signal import Refused
from fractal.store.ledger import Ledger
from fractal.tree import Tree
from fractal.workspace.nodedir import file_lock
from fractal.workspace.rescue import held_history
from fractal.workspace.runenv import forget
from fractal.workspace.teardown import delete_branch, drop_worktree

__all__ = ["Deleted", "delete", "remove_node"]


@dataclass(frozen=True)
class Deleted:
    """One node deleted: the rescue ref that saved it (None when its branch and worktree
    were both gone, so there was nothing left to save) and whether it had gone missing."""

    branch: str
    rescue_ref: str | None
    missing: bool


def delete(ctx: Context, name: str, *, force: bool = False) -> list[Deleted]:
    """Delete node ``name`` and every descendant; return them in teardown order.

    Refused, and recorded as a failed ``delete`` event, when the caller is neither the
    operator nor an ancestor of the node, when any node of the subtree is live, when the
    caller's directory is inside one of the worktrees, and (unless ``force``) when a
    branch has commits its target lacks or a worktree has uncommitted files: the refusal
    lists them; and, even with ``force``, when a worktree holds a committed gitlink whose
    directory is a repository of its own (``rescue.held_history``: no rescue ref could
    hold its history). A node whose worktree or branch vanished is simply deregistered.
    Raises Refused, GitError, StoreError.
    """
    tree, ledger = ctx.tree, ctx.ledger
    with file_lock(tree.lock_path):
        branch = node_named(ctx, name)
        ctx.authorize("delete", branch)
        rows = subtree_rows(ledger, branch)
        facts = {r.node: facts_of(tree, r, with_unmerged=True) for r in rows}
        refusals: dict[str, str] = {}
        for node in deepest_first(facts):
            why = delete_refusal(facts[node], force=force)
            if why is None and facts[node].worktree_exists:  # even forced: nothing could save it
                why = held_history(tree.worktree_of(node))
            if why is None and inside(ctx.cwd, tree.worktree_of(node)):
                why = (f"the current directory is inside {node}'s worktree; run the command "
                       "from elsewhere (e.g. the repository root)")
            if why:
                refusals[node] = why
        if refusals:  # every node's reason at once: the operator fixes them in one go
            for node, why in refusals.items():
                refused = ctx.refuse("delete", node, why)
            raise refused if len(refusals) == 1 else Refused("\n".join(refusals.values()))
        done: list[Deleted] = []
        for node in deepest_first(facts):
            fact = facts[node]
            ref = remove_node(tree, node, operation=Cleanup.DELETE.value, actor=ctx.actor,
                              has_branch=fact.branch_exists)
            ledger.add_event(node, "delete", actor=ctx.actor, status="completed",
                             metadata=f"rescued on {ref}" if ref else "branch already gone")
            done.append(Deleted(node, ref, is_missing(fact)))
        return done


def remove_node(tree: Tree, node: str, *, operation: str, actor: str,
                has_branch: bool) -> str | None:
    """Rescue, then remove ``node``'s worktree, branch, kept environment and registry row;
    return the rescue ref (None only when both the branch and the worktree were gone:
    nothing to save). A worktree whose branch vanished is rescued on its ``HEAD``; when no
    rescue can be written, GitError or FractalError is raised before anything is removed.
    The shared teardown of ``delete``, ``reset`` and ``destroy``; the caller holds the tree
    lock and has checked the node is not live."""

    worktree = tree.worktree_of(node)
    if has_branch or worktree.is_dir():  # a missing node's checkout is saved too
        ref: str | None = rescue_node(tree, node, operation, actor=actor,
                                      branch_gone=not has_branch).ref
    else:
        ref = None  # no branch and no worktree: nothing is left to lose
    drop_worktree(tree.repo, worktree)
    delete_branch(tree.repo, node)
    heal_lock_path(tree, node).unlink(missing_ok=True)
    forget(tree.node(node).run_env_path)  # the run's keys go with the node
    Ledger(tree.db_path).delete_node(node)
    return ref
