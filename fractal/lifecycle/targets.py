"""Resolve the node a verb acts on, cheaply (no runtime, no SQLAlchemy)."""

from __future__ import annotations

from pathlib import Path

from fractal.errors import FractalError
from fractal.tree import Tree, caller_branch, find_tree, resolve_node

__all__ = ["operator_only", "subtree_target", "target_node"]


def target_node(cwd: Path, name: str | None) -> tuple[Tree, str]:
    """Resolve ``name`` (or the caller's node) to a registered branch.

    Raises NodeNotFound for an unknown or ambiguous name, FractalError for the root
    (it has no loop).
    """
    from fractal.store import reader

    tree = find_tree(cwd)
    known = [row.node for row in reader.node_rows(tree.db_path)]
    branch = resolve_node(name, [*known, tree.root], tree) if name else caller_branch(cwd, tree)
    if branch == tree.root:
        raise FractalError(f"{branch} is the tree's root: it has no loop; name a node "
                           "(`fractal node list` shows them)")
    return tree, branch


def subtree_target(cwd: Path, name: str | None) -> tuple[Tree, str]:
    """Like target_node, but the root is allowed (verbs that act on a whole subtree)."""
    from fractal.store import reader

    tree = find_tree(cwd)
    known = [row.node for row in reader.node_rows(tree.db_path)]
    branch = resolve_node(name, [*known, tree.root], tree) if name else caller_branch(cwd, tree)
    return tree, branch


def operator_only(cwd: Path, tree: Tree, verb: str) -> None:
    """Refuse ``verb`` unless the operator at the tree's root runs it: from inside a node's
    loop (or a node's worktree) it would act for the whole tree. Raises FractalError."""
    from fractal.errors import FractalError
    from fractal.lifecycle.steer import acting_branch

    acting = acting_branch(cwd, tree)
    if acting != tree.root:
        raise FractalError(f"{verb} is the operator's: it acts for the whole tree, and "
                           f"{acting} is a node; run it from the main checkout, outside "
                           "any node's loop")
