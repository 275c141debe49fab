"""Cost caps across the tree: a child's ``max_cost`` must fit its parent's remaining budget
at spawn, and the figures a budget-ended run left behind (``start --continue``).

Checked under the tree lock, right before registration, like the spawn caps, so two
concurrent spawns each see the other's registration.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fractal.domain.budget import ceilings as budget
from fractal.domain.config import parse_config
from fractal.domain.states import Status
from fractal.errors import FractalError
from fractal.store.ledger import Ledger
from fractal.store.rows import RunRow
from fractal.tree import Tree, parent_of
from fractal.workspace.nodedir import read_config

__all__ = ["ParentBudget", "check_child_budget", "node_max_cost", "parent_budget",
           "refuse_budget_landing", "run_spent"]


@dataclass(frozen=True)
class ParentBudget:
    """A capped parent's ceiling and what remains of it (USD); ``run_id`` is the parent's
    open run (None: idle, so the whole ceiling remains)."""

    parent: str
    max_cost: float
    remaining: float
    run_id: int | None


def node_max_cost(tree: Tree, ledger: Ledger, branch: str) -> float | None:
    """The node's live ``max_cost``: its config.json (the loop enforces the file), else the
    registry row when the file cannot be read."""
    try:
        config = parse_config(read_config(tree.node(branch).config_path))
        return config.max_cost
    except (FractalError, OSError):
        row = ledger.node(branch)
        return None if row is None else row.max_cost


def run_spent(db_path: Path, run_id: int) -> float:
    """USD spent by ``run_id`` and its descendant runs."""
    from fractal.store.spend import run_spend  # deferred: start-up cost (2 modules)

    return run_spend(db_path, run_id).usd


def parent_budget(tree: Tree, ledger: Ledger, child: str) -> ParentBudget | None:
    """The budget of ``child``'s parent, or None when the parent is the root or uncapped."""
    parent = parent_of(child)
    if parent is None or parent == tree.root:
        return None
    cap = node_max_cost(tree, ledger, parent)
    if cap is None:
        return None
    run_id = ledger.active_run_id(parent)
    spent = run_spent(tree.db_path, run_id) if run_id is not None else 0.0
    return ParentBudget(parent, cap, max(0.0, budget.round_usd(cap - spent)), run_id)


def check_child_budget(tree: Tree, ledger: Ledger, child: str, max_cost: float | None) -> None:
    """Refuse (FractalError) a spawn whose ``max_cost`` does not fit the parent's remaining
    budget; under a capped parent ``max_cost`` is mandatory. Call with the tree lock held."""
    found = parent_budget(tree, ledger, child)
    if found is None:
        return
    left = budget.usd4(found.remaining)
    of = f"{budget.usd(found.max_cost)} max" + ("" if found.run_id is None
                                                  else f", run {found.run_id}")
    if max_cost is None:
        raise FractalError(f"{found.parent} has a cost ceiling ({of}); give {child} a "
                           f"--max-cost of at most {left}, the parent's remaining budget")
    if budget.round_usd(max_cost) > found.remaining:
        raise FractalError(f"--max-cost {budget.usd(max_cost)} does not fit {found.parent}'s "
                           f"remaining budget {left} ({of}); lower it, or raise the parent's "
                           "with `fractal node update`")


def refuse_budget_landing(tree: Tree, branch: str, last: RunRow | None) -> None:
    """Refuse a bare ``start --continue`` after a budget landing (the last run ended
    ``exited`` with exit code 0), naming the figures ("pass --max-cost to arm the next
    run explicitly"). Raises FractalError."""
    if last is None or last.status is not Status.EXITED or last.exit_code != 0:
        return
    spent = budget.usd4(run_spent(tree.db_path, last.run_id))
    cap = f" of {budget.usd(last.max_cost)} max" if last.max_cost is not None else ""
    raise FractalError(f"{branch}'s run {last.run_id} ended on its cost budget ({last.meta}); "
                       f"it spent {spent}{cap}. Arm the next run explicitly: "
                       f"`fractal node start {branch} --continue --max-cost USD`")
