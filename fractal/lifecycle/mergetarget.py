"""Which node a merge names and where its work goes: cheap (no SQLAlchemy, no runtime),
so read commands (``node status``, ``node conflicts``) can use it."""

from __future__ import annotations

from pathlib import Path

from fractal.errors import FractalError
from fractal.tree import Tree, parent_of, resolve_node
from fractal.workspace.nodedir import read_config

__all__ = ["merge_target", "resolve_child"]


def resolve_child(cwd: Path, name: str | None, tree: Tree) -> str:
    """The registered node ``name`` names. Without a name the command is refused: a node
    merges its children, never itself. Raises FractalError, NodeNotFound."""
    from fractal.store import reader

    if not name:
        raise FractalError("name the node to merge (`fractal node merge CHILD`): a node merges "
                           "its children into itself, never itself into its parent; "
                           "`fractal node list` shows them")
    known = [row.node for row in reader.node_rows(tree.db_path)]
    branch = resolve_node(name, [*known, tree.root], tree)
    if branch == tree.root:
        raise FractalError(f"{branch} is the tree's root; name a node to merge into it")
    return branch


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
