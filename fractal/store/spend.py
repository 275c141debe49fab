"""Spend reads: recorded step costs summed over a run's subtree, a node's subtree, an
iteration or a step (what counts as spend: docs/budgets.md).

A run's spend is its own steps plus every descendant run chained to it through
``runs.parent_run_id`` (a recursive CTE); history rows outlive their nodes, so deleted
nodes still count. NULL costs count as zero in the sums but are counted apart: a launched
step (one whose process group was recorded) that ended without a cost is *unpriced*; a
step still in flight has simply not reported yet and is neither priced nor unpriced. Stdlib
``sqlite3`` through the read-only connections of ``reader``: the CLI's ``node cost`` and
the supervisor's budget probes both read here.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fractal.store.reader import _connect

__all__ = ["KNOWN_COST_SUM", "NodeSpend", "Spend", "iteration_spend", "last_iteration_id", "last_step_spend",
           "node_spends", "run_and_iteration_spend", "run_node_spends", "run_spend"]

# Per group: the sum, priced launched steps, unpriced launched steps, all steps.
_SUMS = ("COALESCE(SUM(s.cost), 0.0), "
         "COALESCE(SUM(CASE WHEN s.cost IS NOT NULL AND s.pgid IS NOT NULL THEN 1 END), 0), "
         "COALESCE(SUM(CASE WHEN s.cost IS NULL AND s.pgid IS NOT NULL "
         "AND s.ended_at IS NOT NULL THEN 1 END), 0), "
         "COUNT(*)")
# A group's cost as readers show it (USD, NULL = unknown): NULL when launched steps ended
# without a cost and none recorded one (every figure unknown, so the sum is too), else the
# sum of the known costs (NULL as well for a group without any cost row). The same rule as
# ``Spend.untracked``; the ``activity`` view's run and iteration rows spell it in SQL too.
KNOWN_COST_SUM = ("CASE WHEN COUNT(CASE WHEN cost IS NOT NULL AND pgid IS NOT NULL THEN 1 END) = 0 "
                  "AND COUNT(CASE WHEN cost IS NULL AND pgid IS NOT NULL "
                  "AND ended_at IS NOT NULL THEN 1 END) > 0 THEN NULL ELSE SUM(cost) END")
_SUBTREE = ("WITH RECURSIVE sub(run_id, depth) AS (SELECT CAST(:run_id AS INTEGER), 0 UNION "
            "SELECT r.run_id, sub.depth + 1 FROM runs r JOIN sub ON r.parent_run_id = sub.run_id "
            "WHERE sub.depth < :depth) ")
_RUN_SUMS = _SUBTREE + f"SELECT {_SUMS} FROM steps s WHERE s.run_id IN (SELECT run_id FROM sub)"
_ITERATION_SUMS = f"SELECT {_SUMS} FROM steps s WHERE s.iter_id = :iter_id"
# Both in one statement (one snapshot, one round trip): the run's four figures, then the
# iteration's.
_RUN_AND_ITERATION_SUMS = (_SUBTREE + f"SELECT * FROM (SELECT {_SUMS} FROM steps s WHERE "
                           "s.run_id IN (SELECT run_id FROM sub)) AS run_sums, "
                           f"({_ITERATION_SUMS}) AS iteration_sums")
_NO_DEPTH_LIMIT = 1 << 30


@dataclass(frozen=True)
class Spend:
    """Recorded spend in USD, with ``priced``/``unpriced`` counts of launched steps and the
    number of ``steps`` summed."""

    usd: float = 0.0
    priced: int = 0
    unpriced: int = 0
    steps: int = 0

    @property
    def untracked(self) -> bool:
        """Steps launched, but none recorded a cost: the figure means nothing."""
        return self.priced == 0 and self.unpriced > 0


@dataclass(frozen=True)
class NodeSpend:
    """One node's share of a sum (``cost breakdown``)."""

    node: str
    spend: Spend


def _spend(row: sqlite3.Row | tuple[Any, ...] | None) -> Spend:
    if row is None:
        return Spend()
    total, priced, unpriced, steps = row[0], row[1], row[2], row[3]
    return Spend(float(total or 0.0), int(priced or 0), int(unpriced or 0), int(steps or 0))


def _depth(max_depth: int | None) -> int:
    return _NO_DEPTH_LIMIT if max_depth is None else max(0, max_depth)


def run_spend(db_path: Path, run_id: int, max_depth: int | None = None) -> Spend:
    """The spend of run ``run_id`` and its descendant runs (``max_depth`` levels of them;
    None: all). Raises StoreError when the database cannot be read."""
    with _connect(db_path) as conn:
        return _spend(conn.execute(_RUN_SUMS, {"run_id": run_id,
                                               "depth": _depth(max_depth)}).fetchone())


def run_and_iteration_spend(db_path: Path, run_id: int,
                            iter_id: int | None) -> tuple[Spend, Spend]:
    """``run_spend`` and ``iteration_spend`` in one statement, so one snapshot (the loop's
    probe, after every launch). Through the store's pooled connection (``store.db``) rather than a
    read-only one opened for the call: a supervisor asks this every iteration, and a
    connection opened and closed each time cost it a schema parse and heap churn."""
    from fractal.store.db import transaction  # deferred: start-up cost (3 modules)

    with transaction(db_path, write=False, single=True) as tx:  # one statement
        if iter_id is None:
            return _spend(tx.one(_RUN_SUMS, {"run_id": run_id, "depth": _NO_DEPTH_LIMIT})), Spend()
        row = tx.one(_RUN_AND_ITERATION_SUMS, {"run_id": run_id, "depth": _NO_DEPTH_LIMIT,
                                               "iter_id": iter_id})
    values = tuple(row) if row is not None else ()
    return _spend(values[:4] or None), _spend(values[4:] or None)


def run_node_spends(db_path: Path, run_id: int, max_depth: int | None = None) -> list[NodeSpend]:
    """``run_spend`` split by node, in node order."""
    sql = (_SUBTREE + f"SELECT s.node, {_SUMS} FROM steps s JOIN sub ON s.run_id = sub.run_id "
           "GROUP BY s.node ORDER BY s.node")
    with _connect(db_path) as conn:
        rows = conn.execute(sql, {"run_id": run_id, "depth": _depth(max_depth)}).fetchall()
    return [NodeSpend(str(r[0]), _spend(tuple(r)[1:])) for r in rows]


def node_spends(db_path: Path, branch: str | None,
                max_depth: int | None = None) -> list[NodeSpend]:
    """All-time spend of ``branch`` and every node below it (every node when None), by
    node, in node order; ``max_depth`` limits the levels below ``branch`` (below the root
    when None). Nodes deleted since are included: their rows keep the branch name."""
    if branch is None:
        sql = f"SELECT s.node, {_SUMS} FROM steps s GROUP BY s.node ORDER BY s.node"
        params: tuple[object, ...] = ()
    else:
        prefix = branch + "."
        sql = (f"SELECT s.node, {_SUMS} FROM steps s WHERE s.node = ? OR "
               "substr(s.node, 1, ?) = ? GROUP BY s.node ORDER BY s.node")
        params = (branch, len(prefix), prefix)
    with _connect(db_path) as conn:
        rows = conn.execute(sql, params).fetchall()
    out = [NodeSpend(str(r[0]), _spend(tuple(r)[1:])) for r in rows]
    if max_depth is None:
        return out
    base = branch.count(".") if branch is not None else 0  # a root branch has no dots
    return [n for n in out if n.node.count(".") - base <= max_depth]


def iteration_spend(db_path: Path, iter_id: int) -> Spend:
    """The spend of one iteration's own steps."""
    with _connect(db_path) as conn:
        return _spend(conn.execute(_ITERATION_SUMS, {"iter_id": iter_id}).fetchone())


def last_iteration_id(db_path: Path, node: str, run_id: int | None = None) -> int | None:
    """The newest iteration of ``node`` (of ``run_id`` when given), or None."""
    sql = "SELECT iter_id FROM iterations WHERE node = ?"
    params: list[object] = [node]
    if run_id is not None:
        sql += " AND run_id = ?"
        params.append(run_id)
    with _connect(db_path) as conn:
        row = conn.execute(sql + " ORDER BY iter_id DESC LIMIT 1", params).fetchone()
    return None if row is None else int(row[0])


def last_step_spend(db_path: Path, node: str) -> Spend:
    """The spend of ``node``'s newest step row (its current step while one runs)."""
    sql = (f"SELECT {_SUMS} FROM steps s WHERE s.step_id = "
           "(SELECT MAX(step_id) FROM steps WHERE node = ?)")
    with _connect(db_path) as conn:
        return _spend(conn.execute(sql, (node,)).fetchone())
