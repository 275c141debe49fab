"""Which node a merge names and where its work goes: cheap (no SQLAlchemy, no runtime),
so read commands (``node status``, ``node conflicts``) can use it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fractal.errors import FractalError, StoreError
from fractal.tree import Tree, parent_of
from fractal.workspace.nodedir import read_config

if TYPE_CHECKING:
    from fractal.lifecycle.context import Context
    from fractal.workspace.merge import LandedMerge

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


def merge_target(tree: Tree, child: str, into: str | None) -> str:
    """``into``, else the child's configured ``base``, else its dotted parent."""
    if into:
        return into
    try:
        base = read_config(tree.node(child).config_path).get("base")
    except FractalError:
        base = None
    if isinstance(base, str) and base.strip():
        return base.strip()
    return parent_of(child) or tree.root


def landed_merge(tree: Tree, child: str, target: str) -> LandedMerge | None:
    """The child's newest merge into ``target`` that landed (its ``merges`` row settled
    ``merged``), for ``workspace.merge.merge_base``; None when there is none or the
    database cannot be read (the branches alone then decide the base)."""
    from fractal.store.merges import MergeBook  # deferred: start-up cost (17 modules)
    from fractal.workspace.merge import LandedMerge  # deferred: start-up cost (35 modules)

    try:
        rows = MergeBook(tree.db_path).merges_of(child)
    except StoreError:
        return None
    for row in reversed(rows):
        if row.target == target and row.status == "merged" and row.squash_sha:
            return LandedMerge(row.child_sha, row.squash_sha)
    return None
