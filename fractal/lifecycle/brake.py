"""``fractal pause`` / ``fractal resume``: the tree-wide brake.

``pause`` writes the latch first, so no start or spawn slips through, then pauses every
active node parent-first. ``resume`` lifts the latch, withdraws pauses still pending,
and relaunches parked loops deepest-first.
"""

from __future__ import annotations

from pathlib import Path

from fractal.control import clear_latch, set_latch
from fractal.domain.signals import Signal
from fractal.errors import FractalError
from fractal.lifecycle.resume import resume
from fractal.lifecycle.steer import Signalled, send
from fractal.tree import Tree, find_tree, trees_in


def _tree(cwd: Path, name: str | None) -> Tree:
    tree = find_tree(cwd)
    if name is None or name == tree.root:
        return tree
    for other in trees_in(tree.repo):
        if other.root == name:
            return other
    raise FractalError(f"no tree rooted at {name!r} in {tree.repo}")


def brake(cwd: Path, name: str | None, reason: str | None) -> list[Signalled]:
    """Latch the tree (default: the caller's), then pause every active node in it."""
    tree = _tree(cwd, name)
    set_latch(tree, reason or "paused by fractal pause")
    return send(tree.repo, tree.root, Signal.PAUSE, reason)


def release(cwd: Path, name: str | None) -> list[Signalled]:
    """Lift the latch and resume every paused node of the tree, deepest first."""
    tree = _tree(cwd, name)
    clear_latch(tree)
    return resume(tree.repo, tree.root, lifting_latch=True)
