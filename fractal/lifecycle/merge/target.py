"""Which node a merge names and where its work goes: cheap (no SQLAlchemy, no runtime),
so read commands (``node status``, ``node conflicts``) can use it. ``merge_target`` and
``landed_merge`` live in ``workspace/subtree.py`` (the run loop reads them too)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fractal.errors import FractalError
from fractal.workspace.subtree import landed_merge, merge_target

if TYPE_CHECKING:
    from fractal.lifecycle.context import Context

__all__ = ["landed_merge", "merge_target", "own_dir_prefix", "resolve_child"]


def resolve_child(ctx: Context, name: str | None) -> str:
    """The registered node ``name`` names. Without a name the command is refused: a node
    merges its children, never itself. Raises FractalError, NodeNotFound."""
    if not name:
        raise FractalError("name the node to merge (`fractal node merge CHILD`): a node merges "
                           "its children into itself, never itself into its parent; "
                           "`fractal node list` shows them")
    branch = ctx.subtree(name)
    if branch == ctx.tree.root:
        raise FractalError(f"{branch} is the tree's root; name a node to merge into it")
    return branch


def own_dir_prefix(node: str) -> str:
    """``.fractal/<node>/``: the prefix of ``node``'s own directory in its worktree, whose
    changes neither block a merge into it nor travel."""
    return f".fractal/{node}/"
