"""Spawn caps: ``max_children``, ``max_depth``, ``max_descendants``.

Counted over unsettled nodes (active, paused, idle), with crashed nodes healed first,
and checked under the tree lock right before registration, so concurrent spawns can
never pass a cap together.
"""

from __future__ import annotations

from fractal.domain.states import UNSETTLED, Status
from fractal.errors import FractalError
from fractal.lifecycle.heal import heal_all
from fractal.store.ledger import Ledger
from fractal.store.rows import NodeRow
from fractal.tree import Tree, parent_of


def ancestors(branch: str, tree: Tree) -> list[str]:
    """Ancestors of ``branch`` below the root, nearest first."""
    found: list[str] = []
    parent = parent_of(branch)
    while parent is not None and parent != tree.root:
        found.append(parent)
        parent = parent_of(parent)
    return found


def _live_caps(tree: Tree, row: NodeRow | None) -> NodeRow | None:
    """The registry row with its spawn caps as the node's config.json says now (a hand
    edit counts at once); the registry's values when the file cannot be read."""
    if row is None:
        return None

    from fractal.workspace.nodedir import read_config

    try:
        raw = read_config(tree.node(row.node).config_path)
    except FractalError:
        return row
    caps = {k: raw.get(k) for k in ("max_depth", "max_children", "max_descendants")}
    valid = {k: v for k, v in caps.items()
             if v is None or (isinstance(v, int) and not isinstance(v, bool) and v >= 0)}
    return row._replace(**valid)  # type: ignore[arg-type]


def check_caps(tree: Tree, ledger: Ledger, new_branch: str) -> None:
    """Refuse (FractalError) a spawn of ``new_branch`` that would break an ancestor's cap.

    Call with the tree lock held.
    """
    rows = ledger.nodes()
    heal_all(tree, [r.node for r in rows if r.status is Status.ACTIVE])
    rows = ledger.nodes()
    by_name: dict[str, NodeRow] = {r.node: r for r in rows}
    live = [r.node for r in rows if r.status in UNSETTLED]
    parent = parent_of(new_branch)
    for ancestor in ancestors(new_branch, tree):
        row = _live_caps(tree, by_name.get(ancestor))
        if row is None:
            continue
        depth = new_branch.count(".") - ancestor.count(".")
        if row.max_depth is not None and depth > row.max_depth:
            raise FractalError(f"{ancestor} allows descendants {row.max_depth} level(s) deep "
                               f"(max_depth); {new_branch} would be {depth} deep")
        below = [b for b in live if b.startswith(ancestor + ".")]
        if row.max_descendants is not None and len(below) >= row.max_descendants:
            raise FractalError(f"{ancestor} already has {len(below)} unsettled descendant(s) "
                               f"(max_descendants {row.max_descendants})")
        if ancestor == parent and row.max_children is not None:
            children = [b for b in below if parent_of(b) == ancestor]
            if len(children) >= row.max_children:
                raise FractalError(f"{ancestor} already has {len(children)} unsettled "
                                   f"child(ren) (max_children {row.max_children})")
