"""Reads behind ``fractal open``: what runs now across the tree, and one node's history
(stdlib ``sqlite3``, read-only connections, indexed queries only). They never create
nor upgrade the database: a tree destroyed under an open dashboard raises
``reader.TreeGone``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fractal.store.reader import _connect
from fractal.store.rows import THIS_NODES_RUN, IterationRow, MessageRow, RunRow, StepRow, build
from fractal.store.spend import KNOWN_COST_SUM

__all__ = ["CheckPoint", "History", "LiveRows", "history", "live_rows", "run_links"]


@dataclass(frozen=True)
class LiveRows:
    """Open runs, iterations and steps by node; own spend per run (USD, None unknown)
    for each node's newest run; the newest outbox messages, newest first."""

    runs: dict[str, RunRow]
    iterations: dict[str, IterationRow]
    steps: dict[str, StepRow]
    spent: dict[int, float | None]
    messages: list[MessageRow]
    signals: dict[str, set[str]]  # node -> names pending on its open run


def run_links(db_path: Path, after: int) -> list[tuple[int, int | None, bool]]:
    """``(run_id, parent_run_id, ended)`` of every run newer than run ``after`` and of
    every open run (through the primary key and the ``ended_at`` index): the run tree a
    subtree's spend is summed over, read a little at a time."""
    with _connect(db_path, create=False) as conn:
        rows = conn.execute(
            "SELECT run_id, parent_run_id, CASE WHEN ended_at IS NULL THEN 0 ELSE 1 END "
            "FROM runs WHERE run_id > ? "
            "UNION SELECT run_id, parent_run_id, 0 FROM runs INDEXED BY ix_runs_ended_at "
            "WHERE ended_at IS NULL", (after,)).fetchall()
    return [(int(r[0]), None if r[1] is None else int(r[1]), bool(r[2])) for r in rows]


def live_rows(db_path: Path, newest_runs: list[int], feed: int = 30) -> LiveRows:
    """Read the open rows (``ended_at`` IS NULL, through its index) and the spend of
    ``newest_runs``. The newest open step per node wins (a SYNC before its step)."""
    with _connect(db_path, create=False) as conn:
        runs = {r.node: r for r in (build(RunRow, x) for x in conn.execute(
            "SELECT * FROM runs INDEXED BY ix_runs_ended_at WHERE ended_at IS NULL"))}
        iters = {r.node: r for r in (build(IterationRow, x) for x in conn.execute(
            "SELECT * FROM iterations INDEXED BY ix_iterations_ended_at WHERE ended_at IS NULL "
            "ORDER BY iter_id"))}
        steps = {r.node: r for r in (build(StepRow, x) for x in conn.execute(
            "SELECT * FROM steps INDEXED BY ix_steps_ended_at WHERE ended_at IS NULL "
            "ORDER BY step_id"))}
        spent: dict[int, float | None] = {}
        for start in range(0, len(newest_runs), 500):
            chunk = newest_runs[start:start + 500]
            for run_id, total in conn.execute(
                    f"SELECT run_id, {KNOWN_COST_SUM} FROM steps WHERE run_id IN "
                    f"({', '.join('?' * len(chunk))}) GROUP BY run_id", chunk):
                spent[int(run_id)] = None if total is None else float(total)
            for run_id in chunk:  # a run without steps: nothing spent, nothing priced
                spent.setdefault(run_id, None)
        messages = [build(MessageRow, x) for x in conn.execute(
            "SELECT * FROM messages ORDER BY message_id DESC LIMIT ?", (feed,))]
        signals: dict[str, set[str]] = {}
        open_runs = [r.run_id for r in runs.values()]
        if open_runs:
            for node, name in conn.execute(
                    f"SELECT node, signal FROM signals WHERE run_id IN "
                    f"({', '.join('?' * len(open_runs))})", open_runs):
                signals.setdefault(str(node), set()).add(str(name))
    return LiveRows(runs, iters, steps, spent, messages, signals)


@dataclass(frozen=True)
class CheckPoint:
    """One exit check: when it ended, its exit code and failing-test count."""

    ended_at: str
    exit_code: int
    failures: int | None


@dataclass(frozen=True)
class History:
    """One node's newest runs (newest first) with their iterations and steps (booking
    order), and its newest exit checks (oldest first)."""

    runs: list[RunRow]
    iterations: dict[int, list[IterationRow]]
    steps: dict[int, list[StepRow]]  # by iter_id (0: steps outside an iteration)
    checks: list[CheckPoint]


def history(db_path: Path, node: str, runs: int = 3, checks: int = 12) -> History:
    """The explorer's rows for ``node``: its ``runs`` newest runs and ``checks`` newest
    exit checks, none of a deleted namesake's (``rows.THIS_NODES_RUN``)."""
    with _connect(db_path, create=False) as conn:
        run_rows = [build(RunRow, x) for x in conn.execute(
            f"SELECT * FROM runs WHERE node = ? AND {THIS_NODES_RUN} ORDER BY run_id DESC "
            "LIMIT ?", (node, runs))]
        ids = [r.run_id for r in run_rows]
        iters: dict[int, list[IterationRow]] = {}
        steps: dict[int, list[StepRow]] = {}
        if ids:
            marks = ", ".join("?" * len(ids))
            for x in conn.execute(f"SELECT * FROM iterations WHERE run_id IN ({marks}) "
                                  "ORDER BY iter_id", ids):
                row = build(IterationRow, x)
                iters.setdefault(row.run_id, []).append(row)
            for x in conn.execute(f"SELECT * FROM steps WHERE run_id IN ({marks}) "
                                  "ORDER BY step_id", ids):
                step = build(StepRow, x)
                steps.setdefault(step.iter_id or 0, []).append(step)
        points = [CheckPoint(str(x[0]), int(x[1]), x[2]) for x in conn.execute(
            "SELECT ended_at, exit_code, failures FROM checks WHERE node = ? AND kind = 'exit' "
            "AND ended_at >= COALESCE((SELECT created_at FROM nodes WHERE node = ?), '') "
            "ORDER BY ended_at DESC LIMIT ?", (node, node, checks))]
    return History(run_rows, iters, steps, list(reversed(points)))
