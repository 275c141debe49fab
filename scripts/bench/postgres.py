"""The read commands on 1,000 nodes with the ledger in SQLite and in PostgreSQL, side by
side in one run: the same seeded history in both (through the store's own seam), each
command timed as a fresh ``fractal`` process (the psycopg import included).

The PostgreSQL side runs a throwaway cluster on a Unix socket (``tests/pgcluster.py``);
without a server or the driver the part is skipped with the reason.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from bench.bigdb import timed_reads
from bench.report import Row, section
from bench.sandbox import ROOT, Sandbox

NODES = 1000
RUNS, WARMUP = 10, 2
READS: dict[str, list[str]] = {
    "fractal node status n0001": ["node", "status", "n0001"],
    "fractal node list": ["node", "list"],
    "fractal node activity --limit 50": ["node", "activity", "--limit", "50"],
}
_REPO = Path(__file__).resolve().parents[2]


def _seed(box: Sandbox) -> None:
    """1,000 nodes, each with one run of one iteration of five steps and one event."""
    from fractal.store.db import transaction

    stamp = "2026-12-01T10:00:00.000Z"
    nodes = [{"node": f"{ROOT}.n{i:04d}", "parent": ROOT, "status": "completed",
              "worktree": str(box.repo / ".worktrees" / f"{ROOT}.n{i:04d}"), "at": stamp}
             for i in range(1, NODES + 1)]
    with transaction(box.db) as tx:
        tx.many("INSERT INTO nodes (node, parent, title, status, worktree, created_at, "
                "updated_at) VALUES (:node, :parent, :node, :status, :worktree, :at, :at)",
                nodes)
        for row in nodes:
            run = tx.insert("runs", {"node": row["node"], "agent": "command",
                                     "status": "completed", "started_at": stamp,
                                     "ended_at": stamp})
            it = tx.insert("iterations", {"node": row["node"], "run_id": run, "iter": 1,
                                          "status": "completed", "started_at": stamp,
                                          "ended_at": stamp})
            tx.many("INSERT INTO steps (node, iter_id, run_id, step, step_name, status, cost, "
                    "started_at, ended_at) VALUES (:node, :it, :run, :step, 'S', 'completed', "
                    "0.001, :at, :at)",
                    [{"node": row["node"], "it": it, "run": run, "step": s, "at": stamp}
                     for s in range(1, 6)])
            tx.insert("events", {"node": row["node"], "run_id": run, "event": "commit",
                                 "actor": "loop", "status": "completed", "created_at": stamp})


def run(keep: bool, log: object) -> tuple[list[Row], list[str]]:
    """Rows: each read's wall time on SQLite, then on PostgreSQL, with the targets."""
    sys.path.insert(0, str(_REPO))
    from tests.pgcluster import Cluster, available

    why = available()
    if why is not None:
        return [section("The ledger on PostgreSQL"),
                Row("skipped", [], note=f"n/a ({why})")], []
    base = Path(tempfile.mkdtemp(prefix="fxb-pg-", dir="/dev/shm" if os.path.isdir(
        "/dev/shm") else None))
    base.chmod(0o711)
    cluster = Cluster.start(base)
    boxes: list[Sandbox] = []
    try:
        cluster.admin("CREATE DATABASE bench")
        url = cluster.url("bench")
        times: dict[str, dict[str, list[float]]] = {}
        for backend in ("sqlite", "postgres"):
            box = Sandbox.create()
            boxes.append(box)
            if backend == "postgres":
                box.env["FRACTAL_DATABASE_URL"] = url
                os.environ["FRACTAL_DATABASE_URL"] = url
            try:
                _seed(box)
            finally:
                os.environ.pop("FRACTAL_DATABASE_URL", None)
                from fractal.store.db import close_connections

                close_connections()
            times[backend] = timed_reads(box, READS, RUNS, WARMUP)
    finally:
        for box in boxes:
            box.close(keep=keep)
        cluster.stop()
    rows = [section(f"The ledger on SQLite and on PostgreSQL: {NODES:,} nodes "
                    f"({WARMUP} warm-ups not counted)")]
    for label in READS:
        sqlite_ms = sorted(times["sqlite"][label])[len(times["sqlite"][label]) // 2]
        rows.append(Row(f"{label} [sqlite]", times["sqlite"][label], target="< 200 ms"))
        rows.append(Row(f"{label} [postgres]", times["postgres"][label],
                        target=f"< 200 ms, < {sqlite_ms + 30:.0f} ms (SQLite + 30)"))
    return rows, ["postgres: a local cluster on a Unix socket (fsync off); a server across "
                  "a network adds its round trips to every read"]
