"""A big ledger for the read commands: 100,000 step rows across 50 nodes.

The tree and its database are real (``fractal init`` migrates it to head); the history is
inserted straight into it with sqlite3, in one transaction: 50 settled nodes (10 under the
root, 4 under each of those), 10 runs per node, 20 iterations per run, 10 steps per
iteration, one ``commit`` event per iteration, timestamps one second apart. The nodes
have no worktrees: the read commands only read the database.
"""

from __future__ import annotations

import sqlite3
import time
from datetime import UTC, datetime

from bench.sandbox import ROOT, Sandbox

TOP, KIDS = 10, 4  # 10 children of the root, 4 under each: 50 nodes
RUNS, ITERS, STEPS = 10, 20, 10  # per node, per run, per iteration: 100,000 steps
START = 1_767_225_600.0  # 2026-01-01T00:00:00Z, the first row's time


def _ts(seconds: float) -> str:
    moment = datetime.fromtimestamp(START + seconds, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def node_names() -> list[str]:
    """The 50 branches, parents before children."""
    names: list[str] = []
    for top in range(1, TOP + 1):
        names.append(f"{ROOT}.n{top:02d}")
        names += [f"{ROOT}.n{top:02d}.k{kid}" for kid in range(1, KIDS + 1)]
    return names


def seed(box: Sandbox) -> dict[str, int]:
    """Insert the history; return the row counts written per table."""
    con = sqlite3.connect(box.db, timeout=30.0, isolation_level=None)
    counts = {"nodes": 0, "runs": 0, "iterations": 0, "steps": 0, "events": 0}
    clock = 0.0
    try:
        con.execute("BEGIN IMMEDIATE")
        run_id = iter_id = step_id = 0
        for node in node_names():
            parent = node.rsplit(".", 1)[0]
            con.execute(
                "INSERT INTO nodes (node, parent, title, status, worktree, created_at, "
                "updated_at) VALUES (?, ?, ?, 'completed', ?, ?, ?)",
                (node, parent, f"bench {node}", str(box.repo / ".worktrees" / node),
                 _ts(clock), _ts(clock)))
            counts["nodes"] += 1
            runs, iters, steps, events = [], [], [], []
            for _run in range(RUNS):
                run_id += 1
                run_start = clock
                for number in range(1, ITERS + 1):
                    iter_id += 1
                    iter_start = clock
                    for step in range(1, STEPS + 1):
                        step_id += 1
                        steps.append((step_id, node, iter_id, run_id, step, f"S{step:02d}",
                                      "command", f"s-{iter_id}", "completed", 0, 0.0012,
                                      _ts(clock), _ts(clock + 0.9)))
                        clock += 1
                    iters.append((iter_id, node, run_id, number, "command", f"s-{iter_id}",
                                  "completed", 0, _ts(iter_start), _ts(clock)))
                    events.append((node, run_id, iter_id, "commit", "loop", "completed",
                                   f"backstop {iter_id}", _ts(clock)))
                runs.append((run_id, node, "command", "completed", 0,
                             f"Reached max iterations ({ITERS})", _ts(run_start), _ts(clock)))
            con.executemany("INSERT INTO runs (run_id, node, agent, status, exit_code, "
                            "metadata, started_at, ended_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                            runs)
            con.executemany("INSERT INTO iterations (iter_id, node, run_id, iter, agent, "
                            "session, status, exit_code, started_at, ended_at) VALUES "
                            "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", iters)
            con.executemany("INSERT INTO steps (step_id, node, iter_id, run_id, step, "
                            "step_name, agent, session, status, exit_code, cost, started_at, "
                            "ended_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", steps)
            con.executemany("INSERT INTO events (node, run_id, iter_id, event, actor, status, "
                            "metadata, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", events)
            for table, rows in (("runs", runs), ("iterations", iters), ("steps", steps),
                                ("events", events)):
                counts[table] += len(rows)
        con.execute("COMMIT")
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        con.execute("ANALYZE")
    finally:
        con.close()
    return counts


def timed_reads(box: Sandbox, commands: dict[str, list[str]], runs: int,
                warmup: int) -> dict[str, list[float]]:
    """Milliseconds of each command (``None`` args: skipped), interleaved after warm-ups."""
    for args in commands.values():
        for _ in range(warmup):
            box.timed_cli(args)
    times: dict[str, list[float]] = {label: [] for label in commands}
    for _ in range(runs):
        for label, args in commands.items():
            times[label].append(box.timed_cli(args) * 1e3)
    return times


def has_command(box: Sandbox, args: list[str]) -> bool:
    """Whether ``fractal ARGS --help`` exits 0 (the command exists in this version)."""
    try:
        box.timed_cli([*args, "--help"])
    except Exception:
        return False
    return True


def seed_timed(box: Sandbox) -> tuple[dict[str, int], float]:
    """``seed`` and its wall time in seconds."""
    started = time.monotonic()
    counts = seed(box)
    return counts, time.monotonic() - started
