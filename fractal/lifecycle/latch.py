"""The tree-wide brake (``fractal pause`` / ``fractal resume``) and the checks that keep a
start or a spawn from slipping under a paused tree or a paused (or pausing) ancestor
(ref §1.3, §1.4)."""

from __future__ import annotations

from pathlib import Path

from fractal.domain.outcome import Status
from fractal.domain.signals import Signal
from fractal.errors import FractalError
from fractal.store.ledger import Ledger
from fractal.tree import Tree, parent_of
from fractal.workspace.nodedir import write_atomic


def latch_path(tree: Tree) -> Path:
    """``<root data dir>/.paused``: present while the whole tree is braked."""
    return tree.data_dir / ".paused"


def latched(tree: Tree) -> bool:
    """True while the tree-wide brake is on."""
    return latch_path(tree).exists()


def set_latch(tree: Tree, reason: str) -> None:
    """Put the brake on (atomically)."""
    write_atomic(latch_path(tree), (reason or "paused") + "\n")


def clear_latch(tree: Tree) -> bool:
    """Take the brake off; returns whether it was on."""
    try:
        latch_path(tree).unlink()
        return True
    except FileNotFoundError:
        return False


def pausing(ledger: Ledger, branch: str) -> bool:
    """True when ``branch`` is paused, or active with a pause signal still pending."""
    row = ledger.node(branch)
    if row is None:
        return False
    if row.status is Status.PAUSED:
        return True
    if row.status is not Status.ACTIVE:
        return False
    run = ledger.open_run_of(branch)
    return run is not None and any(s.signal == Signal.PAUSE.value for s in ledger.signals(run.run_id))


def paused_ancestor(tree: Tree, ledger: Ledger, branch: str) -> str | None:
    """The nearest ancestor of ``branch`` (root excluded) that is paused or pausing."""
    parent = parent_of(branch)
    while parent is not None and parent != tree.root:
        if pausing(ledger, parent):
            return parent
        parent = parent_of(parent)
    return None


def refuse_if_braked(tree: Tree, ledger: Ledger, branch: str, verb: str) -> None:
    """Raise FractalError when the tree is latched or an ancestor of ``branch`` is paused."""
    if latched(tree):
        raise FractalError(f"the tree {tree.root} is paused (`fractal resume` lifts it); "
                           f"refusing to {verb} {branch}")
    ancestor = paused_ancestor(tree, ledger, branch)
    if ancestor is not None:
        raise FractalError(f"ancestor {ancestor} is paused or pausing; refusing to {verb} "
                           f"{branch} (resume {ancestor} first)")
