"""Reads behind the attention inbox: one read-only connection, a handful of indexed
queries for the whole tree (stdlib ``sqlite3`` only; sized for 1,000 nodes and
1,000,000 step rows).

``attention_rows`` returns the registry, each node's newest run, the open steps with a
pending gate, the own spend of the newest runs that ended ``exited``, each paused node's
newest ``pause`` event, the newest write instant of each active node, and the inbox's
acknowledgements.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path

from fractal.store.reader import _connect
from fractal.store.rows import NodeRow, RunRow, StepRow

_SQL_NAME = {"meta": "metadata"}


def _columns(cls: type) -> str:
    """The SELECT list of ``cls``'s fields, in order (``meta`` is the ``metadata`` column)."""
    from dataclasses import fields

    return ", ".join(_SQL_NAME.get(f.name, f.name) for f in fields(cls))

__all__ = ["AttentionRows", "attention_rows"]

# Each timestamp column a node writes, read from its (node, column) index (migration 0005).
_WRITES = (("runs", "started_at"), ("runs", "ended_at"), ("iterations", "started_at"),
           ("iterations", "ended_at"), ("steps", "started_at"), ("steps", "ended_at"),
           ("events", "created_at"))


@dataclass(frozen=True)
class AttentionRows:
    """Everything ``attention_rows`` read; timestamps are the stored ISO text."""

    nodes: list[NodeRow]
    last_runs: dict[str, RunRow]
    gates: dict[str, list[StepRow]]
    spent: dict[int, float | None]
    pauses: dict[str, tuple[str, str]]  # node -> (created_at, reason)
    last_writes: dict[str, str]
    acks: dict[str, str]  # item key -> fingerprint


def _acks(conn: sqlite3.Connection) -> dict[str, str]:
    try:
        rows = conn.execute("SELECT item_key, fingerprint FROM inbox_acks").fetchall()
    except sqlite3.OperationalError:  # a database from before migration 0009
        return {}
    return {str(r[0]): str(r[1]) for r in rows}


def attention_rows(db_path: Path) -> AttentionRows:
    """Read the facts of every node in one read-only connection. Raises StoreError."""
    with _connect(db_path) as conn:
        conn.row_factory = None  # plain tuples, built positionally: 1,000s of rows
        nodes = [NodeRow(*r) for r in conn.execute(
            f"SELECT {_columns(NodeRow)} FROM nodes ORDER BY node_id")]
        runs = {r.node: r for r in (RunRow(*row) for row in conn.execute(
            f"SELECT {_columns(RunRow)} FROM runs WHERE run_id IN "
            "(SELECT MAX(run_id) FROM runs GROUP BY node)"))}
        gates: dict[str, list[StepRow]] = {}
        for row in conn.execute(f"SELECT {_columns(StepRow)} FROM steps INDEXED BY "
                                "ix_steps_ended_at WHERE ended_at IS NULL ORDER BY step_id"):
            step = StepRow(*row)
            if step.approved == "":
                gates.setdefault(step.node, []).append(step)
        exited = [r.run_id for r in runs.values() if r.status == "exited"]
        spent: dict[int, float | None] = {}
        for start in range(0, len(exited), 500):
            chunk = exited[start:start + 500]
            marks = ", ".join("?" * len(chunk))
            for run_id, total, priced in conn.execute(
                    f"SELECT run_id, SUM(cost), COUNT(cost) FROM steps WHERE run_id IN "
                    f"({marks}) GROUP BY run_id", chunk):
                spent[int(run_id)] = float(total) if priced else None
        paused = [n.node for n in nodes if n.status == "paused"]
        pauses: dict[str, tuple[str, str]] = {}
        for node in paused:
            row = conn.execute("SELECT created_at, metadata FROM events WHERE node = ? AND "
                               "event = 'pause' ORDER BY created_at DESC LIMIT 1",
                               (node,)).fetchone()
            if row is not None:
                pauses[node] = (str(row[0]), str(row[1]))
        writes: dict[str, str] = {}
        for node in (n.node for n in nodes if n.status == "active"):
            arms = " UNION ALL ".join(f"SELECT MAX({column}) FROM {table} WHERE node = ?"
                                      for table, column in _WRITES)
            stamps = [r[0] for r in conn.execute(arms, [node] * len(_WRITES)) if r[0]]
            if stamps:
                writes[node] = max(stamps)
        return AttentionRows(nodes, runs, gates, spent, pauses, writes, _acks(conn))
