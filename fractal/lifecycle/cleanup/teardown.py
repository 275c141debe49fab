"""``fractal reset`` and ``fractal destroy``: remove every node of a tree, or the tree.

``reset`` removes every node (worktrees, branches, registry rows) and keeps the root, the
database with its history, and the rescue refs. ``destroy`` is the inverse of ``fractal
init`` for the tree: it resets it, then removes the root's data directory (the database
and the tree's config; for the last tree of the repository, also the exclude block
``init`` wrote). Both write a rescue ref of every node's branch first, refuse
while any node is live, and refuse when the caller's directory is inside a worktree
they would remove. The root branch and its checkout are never touched.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from fractal.domain.cleanup import Cleanup, deepest_first, tree_refusal
from fractal.lifecycle.cleanup.delete import Deleted, remove_node
from fractal.lifecycle.cleanup.targets import facts_of, inside
from fractal.lifecycle.context import Context
from fractal.tree import trees_in
from fractal.workspace import git
from fractal.workspace.nodedir import file_lock
from fractal.workspace.teardown import remove_exclude_block

__all__ = ["TornDown", "destroy", "plan", "reset"]


@dataclass(frozen=True)
class TornDown:
    """What ``reset`` or ``destroy`` removed: the nodes (teardown order) and, for destroy,
    the data directory."""

    root: str
    nodes: tuple[Deleted, ...]
    data_dir: Path | None = None


def plan(ctx: Context) -> list[str]:
    """The nodes ``reset``/``destroy`` would remove, in teardown order (for the prompt)."""
    return deepest_first(r.node for r in ctx.ledger.nodes() if r.node != ctx.tree.root)


def reset(ctx: Context) -> TornDown:
    """Remove every node of the tree, deepest first, after a rescue ref of each branch.

    Only the operator at the root may reset. Refused (recorded as a failed ``reset`` event
    on the root) while any node is live or when the caller is inside a node's worktree.
    Raises Refused, GitError, StoreError.
    """
    return _teardown(ctx, Cleanup.RESET)


def destroy(ctx: Context) -> TornDown:
    """Reset the tree, then delete its data directory (database and config): the inverse
    of ``fractal init``. The rescue refs, the root branch and its checkout stay. Same
    refusals as ``reset``. Raises Refused, GitError, StoreError, OSError."""
    from fractal.lifecycle.notify import stop_watcher  # deferred: start-up cost (5 modules)
    from fractal.store.engine import close_engines  # deferred: start-up cost (185 modules)

    done = _teardown(ctx, Cleanup.DESTROY)
    tree = ctx.tree
    stop_watcher(tree)  # it reads the database every few seconds and would recreate it
    close_engines()
    # Renamed first (one atomic step), so a reader opening the database meanwhile (an open
    # dashboard) finds it gone instead of recreating a -shm file the removal trips on.
    # The renamed directory is no tree (``trees_in`` skips dot names); one a destroy
    # killed mid-way left behind is removed here too.
    doomed = tree.data_dir.with_name(f".{tree.data_dir.name}.destroyed-{os.getpid()}")
    for left in tree.data_dir.parent.glob(f".{tree.data_dir.name}.destroyed-*"):
        shutil.rmtree(left, ignore_errors=True)
    tree.data_dir.rename(doomed)
    shutil.rmtree(doomed)
    with contextlib.suppress(OSError):  # .fractal/, unless another tree's data lives there
        tree.data_dir.parent.rmdir()
    if not any(p for p in tree.worktrees_dir.glob("*") if not p.name.startswith(".")):
        shutil.rmtree(tree.worktrees_dir, ignore_errors=True)  # only lock files were left
    if not trees_in(tree.repo):  # the last tree of the repository: init's exclude block too
        remove_exclude_block(git.common_dir(tree.repo))
    return TornDown(root=done.root, nodes=done.nodes, data_dir=tree.data_dir)


def _teardown(ctx: Context, verb: Cleanup) -> TornDown:
    tree, ledger = ctx.tree, ctx.ledger
    why = ctx.refusal(verb.value, tree.root)
    if why is not None:
        raise ctx.refuse(verb.value, tree.root, f"{why}; {ctx.acting} may delete its own "
                         "descendants (`fractal node delete NODE`)")
    with file_lock(tree.lock_path):
        rows = [r for r in ledger.nodes() if r.node != tree.root]
        facts = {r.node: facts_of(tree, r) for r in rows}
        why = tree_refusal(facts.values(), verb.value)
        if why is None:
            where = next((n for n in facts if inside(ctx.cwd, tree.worktree_of(n))), None)
            if where:
                why = (f"the current directory is inside {where}'s worktree; run the command "
                       f"from the repository root {tree.repo}")
        if why:
            raise ctx.refuse(verb.value, tree.root, why)
        done: list[Deleted] = []
        for node in deepest_first(facts):
            fact = facts[node]
            ref = remove_node(tree, node, operation=verb.value, actor=ctx.actor,
                              has_branch=fact.branch_exists)
            ledger.add_event(node, "delete", actor=ctx.actor, status="completed",
                             metadata=f"{verb.value}; rescued on {ref}" if ref
                             else f"{verb.value}; branch already gone")
            done.append(Deleted(node, ref, not fact.branch_exists))
        ledger.add_event(tree.root, verb.value, actor=ctx.actor, status="completed",
                         metadata=f"{len(done)} node(s) removed")
        return TornDown(root=tree.root, nodes=tuple(done))
