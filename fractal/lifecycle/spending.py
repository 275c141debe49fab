"""``fractal node cost spent|remaining|breakdown``: read the budget ledger (docs/budgets.md).

Plain reads through ``store.spend`` (stdlib sqlite3): no runtime, no SQLAlchemy. Scopes:
the default is everything the node and its subtree ever recorded; ``run`` the node's open
run (else its last one) with every descendant run chained to it; ``iter`` the newest
iteration's own steps; ``step`` the newest step.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from fractal.domain import budget
from fractal.domain.budget import Caps
from fractal.domain.config import parse_config
from fractal.errors import FractalError
from fractal.lifecycle.context import Context
from fractal.tree import Tree
from fractal.workspace.nodedir import read_config

__all__ = ["Scope", "SpentReport", "breakdown", "remaining", "spent"]


class Scope(StrEnum):
    """What a cost read covers."""

    ALL = "all"
    RUN = "run"
    ITER = "iter"
    STEP = "step"


@dataclass(frozen=True)
class SpentReport:
    """A sum: ``usd`` with the ``priced``/``unpriced`` launched-step counts."""

    branch: str
    scope: Scope
    usd: float
    priced: int
    unpriced: int

    @property
    def text(self) -> str:
        """``$X.XXXX``, or ``untracked`` when steps ran but none recorded a cost."""
        if self.priced == 0 and self.unpriced > 0:
            return "untracked"
        return budget.usd4(self.usd)


def _run_of(db: Path, branch: str) -> int | None:
    """The node's open run, else its newest, else None."""
    from fractal.store import reader

    last = reader.last_run(db, branch)
    return None if last is None else last.run_id


def _loop_node(tree: Tree, branch: str, scope: Scope) -> None:
    if branch == tree.root and scope is not Scope.ALL:
        raise FractalError(f"{branch} is the tree's root: it has no runs; name a node, or "
                           "drop --run/--iter/--step for the whole tree's spend")


def spent(ctx: Context, name: str | None, scope: Scope = Scope.ALL,
          max_depth: int | None = None) -> SpentReport:
    """What ``name`` (default: the caller's node; the whole tree at the root) spent in
    ``scope``; ``max_depth`` limits the levels of descendants counted (ALL and RUN)."""
    from fractal.store import spend

    tree, branch = ctx.tree, ctx.subtree(name)
    _loop_node(tree, branch, scope)
    db = tree.db_path
    if scope is Scope.ALL:
        parts = spend.node_spends(db, None if branch == tree.root else branch, max_depth)
        found = spend.Spend(sum(p.spend.usd for p in parts), sum(p.spend.priced for p in parts),
                            sum(p.spend.unpriced for p in parts), sum(p.spend.steps for p in parts))
    elif scope is Scope.RUN:
        run_id = _run_of(db, branch)
        found = spend.run_spend(db, run_id, max_depth) if run_id is not None else spend.Spend()
    elif scope is Scope.ITER:
        iter_id = spend.last_iteration_id(db, branch)
        found = spend.iteration_spend(db, iter_id) if iter_id is not None else spend.Spend()
    else:
        found = spend.last_step_spend(db, branch)
    return SpentReport(branch, scope, found.usd, found.priced, found.unpriced)


def _caps(tree: Tree, branch: str) -> Caps:
    """The node's live caps (its config.json; the registry's max_cost when unreadable)."""
    try:
        cfg = parse_config(read_config(tree.node(branch).config_path))
    except (FractalError, OSError):
        from fractal.store import reader

        row = reader.node_row(tree.db_path, branch)
        return budget.caps_of(row.max_cost if row else None, None, None, None)
    return budget.caps_of(cfg.max_cost, cfg.max_iter_cost, cfg.max_step_cost,
                          cfg.reserve_budget)


def remaining(ctx: Context, name: str | None, scope: Scope = Scope.RUN) -> str:
    """``$X.XXXX`` left in ``scope`` (clamped at 0), or ``no budget`` when uncapped there.

    RUN: ``max_cost`` (of an open run, at most the ceiling its row records, as its loop
    enforces: ``budget.enforced_caps``) minus the open (else last) run's subtree spend; ITER:
    ``max_iter_cost`` minus the newest iteration's spend; STEP: the per-step budget a launch
    would get now (docs/budgets.md, the per-step budget).
    """
    from fractal.store import reader, spend

    tree, branch = ctx.tree, ctx.subtree(name)
    _loop_node(tree, branch, Scope.RUN if scope is Scope.ALL else scope)
    caps, db = _caps(tree, branch), tree.db_path
    last = reader.last_run(db, branch)
    run_id = None if last is None else last.run_id
    if last is not None and last.ended_at is None:  # the open run's loop holds its ceiling
        caps = budget.enforced_caps(caps, last.max_cost)
    run_spent = spend.run_spend(db, run_id).usd if run_id is not None else 0.0
    iter_id = spend.last_iteration_id(db, branch, run_id) if run_id is not None else None
    iter_spent = spend.iteration_spend(db, iter_id).usd if iter_id is not None else 0.0
    if scope is Scope.ITER:
        cap = caps.max_iter_cost
        left = None if cap is None else max(0.0, budget.round_usd(cap - iter_spent))
    elif scope is Scope.STEP:
        left = budget.step_budget(caps, run_spent, iter_spent)
        left = None if left is None else max(0.0, left)
    else:
        left = budget.run_remaining(caps, run_spent)
    return "no budget" if left is None else budget.usd4(left)


def breakdown(ctx: Context, name: str | None, *, run: bool = False,
              max_depth: int | None = None) -> tuple[list[dict[str, object]], int]:
    """Per-node rows ``node, max_cost, spent, unpriced`` of the subtree, and the total
    unpriced count. Nodes no longer registered are listed as ``<branch> (deleted)``;
    ``spent`` is ``untracked`` for a node whose launched steps all lack a cost."""
    from fractal.store import reader, spend

    tree, branch = ctx.tree, ctx.subtree(name)
    db = tree.db_path
    registry = {r.node: r for r in reader.node_rows(db)}
    if run:
        _loop_node(tree, branch, Scope.RUN)
        run_id = _run_of(db, branch)
        parts = spend.run_node_spends(db, run_id, max_depth) if run_id is not None else []
    else:
        top = None if branch == tree.root else branch
        parts = spend.node_spends(db, top, max_depth)
    found = {p.node: p.spend for p in parts}
    base = branch.count(".")
    members = [b for b in registry if (branch == tree.root or b == branch
                                       or b.startswith(branch + "."))
               and (max_depth is None or b.count(".") - base <= max_depth)]
    if run:
        members = [b for b in members if b == branch]
    rows: list[dict[str, object]] = []
    for node in sorted(set(members) | set(found)):
        share = found.get(node, spend.Spend())
        row = registry.get(node)
        rows.append({"node": node if row is not None else f"{node} (deleted)",
                     "max_cost": row.max_cost if row is not None else None,
                     "spent": "untracked" if share.untracked else budget.round_usd(share.usd),
                     "unpriced": share.unpriced})
    return rows, sum(s.unpriced for s in found.values())
