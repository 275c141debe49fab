"""``fractal node conflicts``: would a node's children collide, with its tip or each other?

For each direct child of the node: the child against its merge target's current tip, then
every pair of siblings, each computed with ``git merge-tree --write-tree`` (the object store
alone: no worktree, index or ref is touched). Conflicts under ``.fractal/`` do not count
(node directories never travel). The operator may ask about any node, a node about itself
and its descendants.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from itertools import combinations
from typing import TYPE_CHECKING

from fractal.errors import FractalError
from fractal.lifecycle.context import Context
from fractal.tree import Tree, parent_of
from fractal.workspace import git

if TYPE_CHECKING:
    from fractal.domain.merge.conflicts import ConflictPair

__all__ = ["ConflictReport", "children_conflict_detail", "node_conflicts", "pair_conflicts"]


@dataclass(frozen=True)
class ConflictReport:
    """The pairs compared for ``node`` (children against targets first, then siblings)
    and the milliseconds each comparison took, in the same order; ``skipped``, the
    registered children left out, ``(branch, key)`` by branch with a key of
    ``domain.merge.conflicts.SKIPPED`` (``merged``, ``nothing``, ``branch``)."""

    node: str
    pairs: tuple[ConflictPair, ...]
    elapsed_ms: tuple[float, ...] = ()
    skipped: tuple[tuple[str, str], ...] = ()


def _children(tree: Tree, node: str) -> list[str]:
    from fractal.store import reader  # deferred: start-up cost (11 modules)

    return sorted(row.node for row in reader.node_rows(tree.db_path)
                  if parent_of(row.node) == node and git.branch_exists(tree.repo, row.node))


def pair_conflicts(tree: Tree, children: list[str], *, siblings: bool = True,
                   left_out: dict[str, str] | None = None
                   ) -> tuple[list[ConflictPair], list[float]]:
    """Compare each child with its target's tip (and, with ``siblings``, each pair of the
    children that still have work to bring). A child whose target already holds all of
    its work is left out: it can no longer collide with anyone; ``left_out`` receives it
    as ``merged`` (a merge of it into that target landed) or ``nothing`` (none did: it
    never committed anything that travels)."""
    if not children:
        return [], []
    # The merge machinery loads here, not with the module: ``node status`` reaches this
    # module for every node but compares only when the node has children.
    from fractal.domain.merge.conflicts import ConflictPair  # deferred: start-up cost (2 modules)

    # deferred: start-up cost (2 modules)
    from fractal.lifecycle.merge.target import landed_merge, merge_target
    from fractal.workspace import merge as gitmerge  # deferred: start-up cost (21 modules)

    pairs: list[ConflictPair] = []
    took: list[float] = []

    def compare(left: str, right: str) -> None:
        started = time.perf_counter()
        try:
            files = gitmerge.merge_tree(tree.repo, right, left).conflicts
        except FractalError:
            files = ("(git could not merge these branches)",)
        took.append((time.perf_counter() - started) * 1000.0)
        pairs.append(ConflictPair(left, right, files))

    pending: list[str] = []
    for child in children:
        target = merge_target(tree, child, None)
        if not git.branch_exists(tree.repo, target):
            pending.append(child)
            continue
        started = time.perf_counter()
        try:
            landed = landed_merge(tree, child, target)
            plan = gitmerge.plan_squash(tree.repo, child, target, landed)
            files = plan.conflicts
            if not files and not plan.files:  # nothing of it is left to collide
                if left_out is not None:
                    left_out[child] = "merged" if landed is not None else "nothing"
                continue
        except FractalError:
            files = ("(git could not merge these branches)",)
        took.append((time.perf_counter() - started) * 1000.0)
        pairs.append(ConflictPair(child, target, files))
        pending.append(child)
    if siblings:
        for left, right in combinations(pending, 2):
            compare(left, right)
    return pairs, took


def node_conflicts(ctx: Context, name: str | None) -> ConflictReport:
    """The conflict report for ``name`` (default: the caller's node; the root's children
    at the root). Raises Refused, NodeNotFound."""
    from fractal.store import reader  # deferred: start-up cost (11 modules)

    tree, node = ctx.tree, ctx.subtree(name)
    ctx.authorize("conflicts", node)
    children = _children(tree, node)
    left_out = {row.node: "branch" for row in reader.node_rows(tree.db_path)
                if parent_of(row.node) == node and row.node not in children}
    pairs, took = pair_conflicts(tree, children, left_out=left_out)
    return ConflictReport(node, tuple(pairs), tuple(took), tuple(sorted(left_out.items())))


def children_conflict_detail(tree: Tree, node: str) -> str:
    """``2 children conflict (calc/ops.py)`` when children of ``node`` would conflict with
    their target's tip; empty when none does (or it has no children)."""
    try:
        pairs, _ = pair_conflicts(tree, _children(tree, node), siblings=False)
    except FractalError:
        return ""
    hit = [p for p in pairs if p.conflicts]
    if not hit:
        return ""
    files = list(dict.fromkeys(f for p in hit for f in p.files))
    shown = ", ".join(files[:3]) + (f" ... and {len(files) - 3} more" if len(files) > 3 else "")
    noun = "child conflicts" if len(hit) == 1 else "children conflict"
    return f"{len(hit)} {noun} ({shown})"
