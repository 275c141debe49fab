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


def _too_deep(row: NodeRow, new_branch: str) -> str | None:
    """Why ancestor ``row``'s ``max_depth`` refuses ``new_branch``, or None."""
    depth = new_branch.count(".") - row.node.count(".")
    if row.max_depth is None or depth <= row.max_depth:
        return None
    return (f"{row.node} allows descendants {row.max_depth} level(s) deep (max_depth); "
            f"{new_branch} would be {depth} deep")


def check_pool_depth(tree: Tree, ledger: Ledger, pool: str) -> None:
    """Refuse (FractalError) a pool node ``pool`` whose workers, one level below it, an
    ancestor's ``max_depth`` (as its config.json says now) would refuse: checked before
    the pool node is made, so no pool is left that could never start a worker."""
    worker = f"{pool}.worker"  # any worker: only its depth counts
    by_name = {r.node: r for r in ledger.nodes()}
    for ancestor in ancestors(worker, tree):
        row = _live_caps(tree, by_name.get(ancestor))
        why = None if row is None else _too_deep(row, worker)
        if why is not None:
            raise FractalError(f"a pool's workers are one level below it, and {why}; make "
                               "the pool higher up the tree, or raise that max_depth "
                               f"(`fractal node update {ancestor} --max-depth N`)")


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
        why = _too_deep(row, new_branch)
        if why is not None:
            raise FractalError(why)
        below = [b for b in live if b.startswith(ancestor + ".")]
        if row.max_descendants is not None and len(below) >= row.max_descendants:
            raise FractalError(f"{ancestor} already has {len(below)} unsettled descendant(s) "
                               f"(max_descendants {row.max_descendants})")
        if ancestor == parent and row.max_children is not None:
            children = [b for b in below if parent_of(b) == ancestor]
            if len(children) >= row.max_children:
                raise FractalError(f"{ancestor} already has {len(children)} unsettled "
                                   f"child(ren) (max_children {row.max_children})")
