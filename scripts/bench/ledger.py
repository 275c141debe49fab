"""A large synthetic ledger for timing the cost reads (``fractal node cost spent``
on 100,000 step rows across 50 nodes, target under 300 ms).

Rows are written straight into the sandbox's database with ``sqlite3``: a node ``cost`` with
7 children of 6 children each (50 nodes), one run per node chained to its parent's run
through ``parent_run_id``, and the steps spread evenly over 20 iterations per run. About
one step in twenty has no cost (unpriced).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

TOP = "cost"
CHILDREN, GRANDCHILDREN = 7, 6  # 1 + 7 + 42 = 50 nodes
STEPS, ITERATIONS = 100_000, 20
STAMP = "2026-01-01T00:00:00.000Z"


def node_names(root: str) -> list[tuple[str, str]]:
    """(branch, parent) for the 50 synthetic nodes, parents first."""
    top = f"{root}.{TOP}"
    names = [(top, root)]
    for c in range(CHILDREN):
        child = f"{top}.c{c}"
        names.append((child, top))
        names += [(f"{child}.g{g}", child) for g in range(GRANDCHILDREN)]
    return names


def build(db: Path, root: str) -> int:
    """Write the nodes, runs, iterations and steps; return the number of step rows."""
    names = node_names(root)
    per_node = STEPS // len(names)
    conn = sqlite3.connect(db)
    try:
        runs: dict[str, int] = {}
        step_rows: list[tuple[object, ...]] = []
        for branch, parent in names:
            conn.execute("INSERT INTO nodes (node, parent, status, max_cost, created_at) "
                         "VALUES (?, ?, 'completed', 100.0, ?)", (branch, parent, STAMP))
            cur = conn.execute(
                "INSERT INTO runs (node, parent_run_id, agent, max_cost, status, exit_code, "
                "metadata, started_at, ended_at) VALUES (?, ?, 'bench', 100.0, 'completed', 0, "
                "'', ?, ?)", (branch, runs.get(parent), STAMP, STAMP))
            runs[branch] = int(cur.lastrowid or 0)
            iters = []
            for number in range(1, ITERATIONS + 1):
                cur = conn.execute(
                    "INSERT INTO iterations (node, run_id, iter, status, exit_code, metadata, "
                    "started_at, ended_at) VALUES (?, ?, ?, 'completed', 0, '', ?, ?)",
                    (branch, runs[branch], number, STAMP, STAMP))
                iters.append(int(cur.lastrowid or 0))
            for n in range(per_node):
                cost = None if n % 20 == 19 else round(0.001 * (n % 7 + 1), 4)
                step_rows.append((branch, iters[n % ITERATIONS], runs[branch], n % 5 + 1,
                                  f"S{n % 5 + 1}", "completed", 0, cost, 4242, 1.0, "",
                                  STAMP, STAMP))
        conn.executemany(
            "INSERT INTO steps (node, iter_id, run_id, step, step_name, status, exit_code, "
            "cost, pgid, pgid_started, metadata, started_at, ended_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", step_rows)
        conn.commit()
        return len(step_rows)
    finally:
        conn.close()
