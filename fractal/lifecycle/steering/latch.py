"""The checks that keep a start or a spawn from slipping under a braked tree or a paused
(or pausing) ancestor. The latch itself and the pause reads are the control plane's
(``fractal.control``), shared with the loop's own boot-time brake."""

from __future__ import annotations

from fractal.control import latched, paused_ancestor
from fractal.errors import FractalError
from fractal.store.ledger import Ledger
from fractal.tree import Tree

__all__ = ["refuse_if_braked"]


def refuse_if_braked(tree: Tree, ledger: Ledger, branch: str, verb: str) -> None:
    """Raise FractalError when the tree is latched or an ancestor of ``branch`` is paused
    or pausing; ``verb`` names what is refused (``start``, ``spawn``)."""
    if latched(tree):
        raise FractalError(f"the tree {tree.root} is paused (`fractal resume` lifts it); "
                           f"refusing to {verb} {branch}")
    ancestor = paused_ancestor(tree, ledger, branch)
    if ancestor is not None:
        raise FractalError(f"ancestor {ancestor} is paused or pausing; refusing to {verb} "
                           f"{branch} (resume {ancestor} first)")
