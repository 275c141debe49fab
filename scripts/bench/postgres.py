"""The ledger in SQLite and in PostgreSQL, side by side in one run, each number beside
its target (a timing is never a pass or a fail):

- the read commands on 1,000 nodes: the same seeded history in both (through the
  store's own seam), each command timed as a fresh ``fractal`` process;
- the supervisor's overhead per step (``bench.trace``: agent exit -> next agent
  spawned, 2 iterations of 25 no-op steps), PostgreSQL's within 1.3x SQLite's;
- verb -> reaction: ``fractal node approve`` at an approval gate, from the gate's
  release (its ``approved`` time) to the next step's row opening; on PostgreSQL also
  with the node's ``.wake`` out of the verb's reach (a directory), as for a verb from
  another host, which only the wake channel's ``NOTIFY`` reaches (p95 under 100 ms);
- 20 nodes x 50 steps at once (``bench.throughput``), counting lock errors in the
  supervisors' logs and the rows' reasons (0 expected).

The PostgreSQL side runs a throwaway cluster on a Unix socket (``tests/pgcluster.py``);
without a server or the driver the part is skipped with the reason.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench import throughput
from bench.bigdb import timed_reads
from bench.report import Row, section
from bench.sandbox import ROOT, BenchError, Sandbox
from bench.trace import Intervals, intervals, read_trace
from bench.verbs import epoch, until

NODES = 1000
RUNS, WARMUP = 10, 2
READS: dict[str, list[str]] = {
    "fractal node status n0001": ["node", "status", "n0001"],
    "fractal node list": ["node", "list"],
    "fractal node activity --limit 50": ["node", "activity", "--limit", "50"],
}
_REPO = Path(__file__).resolve().parents[2]
OVERHEAD_STEPS, OVERHEAD_ITERS = 25, 2
GATES = 15  # approval samples per series
SETTLE = 0.05  # s after a gate is pending, so the verb lands inside its wait
LOCK_WORDS = re.compile(r"database is locked|database table is locked|SQLITE_BUSY|"
                        r"lock timeout|deadlock detected|could not serialize|"
                        r"stayed locked|is locked by another process", re.I)


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


def _overhead(box: Sandbox) -> Intervals:
    """A node of 2 iterations x 25 no-op steps started with ``FRACTAL_TRACE``; its
    intervals. Raises BenchError when it does not complete."""
    box.add_node("steps", steps=OVERHEAD_STEPS, max_iters=OVERHEAD_ITERS)
    trace = box.base / "trace-steps.log"
    box.start("steps", trace)
    status = box.wait_settled("steps", 300)
    if status != "completed":
        raise BenchError(f"node steps ended {status}, not completed")
    rows = box.sql("SELECT step_id, iter_id FROM steps WHERE node = ?", f"{ROOT}.steps")
    return intervals(read_trace(trace), {int(str(r[0])): int(str(r[1])) for r in rows})


def _approvals(box: Sandbox, name: str, unreachable: bool) -> list[float]:
    """ms from each gate's release to the next step's row opening, for GATES gates of
    node ``name`` (each followed by a no-op step); ``unreachable``: the node's ``.wake``
    is a directory, so the verb's touch cannot reach it (only the ledger can)."""
    steps: dict[str, str] = {}
    for n in range(1, GATES + 1):
        steps[f"{2 * n - 1:02d}-GATE{n:02d}.md"] = "---\nrequires_approval: true\n---\nnoop\n"
        steps[f"{2 * n:02d}-NEXT{n:02d}.md"] = "noop\n"
    box.add_custom_node(name, steps, "--max-iters", "1", "--no-sync")
    if unreachable:
        wake = box.repo / ".worktrees" / f"{ROOT}.{name}" / ".fractal" / f"{ROOT}.{name}" / ".wake"
        wake.unlink(missing_ok=True)
        wake.mkdir()
    box.cli("node", "start", name)
    branch = f"{ROOT}.{name}"
    samples: list[float] = []
    last = 0
    for _ in range(GATES):
        gate = until(lambda after=last: _one(box.sql(
            "SELECT step_id FROM steps WHERE node = ? AND step_id > ? AND approved = '' AND "
            "ended_at IS NULL AND metadata = 'awaiting approval'", branch, after)), 60,
            f"{name}: a gate pending")
        time.sleep(SETTLE)
        box.cli("node", "approve", name)
        opened, released = until(lambda held=gate: _one(box.sql(
            "SELECT s.started_at, g.approved FROM steps s, steps g WHERE s.node = ? AND "
            "g.step_id = ? AND s.step_id > g.step_id", branch, held), whole=True), 30,
            f"{name}: the step after the gate")
        samples.append((epoch(opened) - epoch(released)) * 1000)
        last = gate
    box.wait_settled(name, 60)
    return samples


def _one(rows: list[tuple[object, ...]], whole: bool = False) -> object:
    if not rows:
        return None
    return rows[0] if whole else rows[0][0]


def _lock_errors(box: Sandbox) -> int:
    """Lock errors in every node's supervisor log and in the rows' reasons, any backend's
    wording (SQLite's busy file, PostgreSQL's lock timeout, deadlock, serialization)."""
    count = 0
    for log in box.repo.glob(f".worktrees/{ROOT}.*/.fractal/{ROOT}.*/supervisor.log"):
        count += len(LOCK_WORDS.findall(log.read_text(errors="replace")))
    for table in ("runs", "iterations", "steps", "events"):
        count += sum(1 for (meta,) in box.sql(f"SELECT metadata FROM {table}")
                     if LOCK_WORDS.search(str(meta)))
    return count


def _loop_part(url: str | None, many_url: str | None, boxes: list[Sandbox],
               log: Callable[[str], None]) -> dict[str, object]:
    """The overhead, reaction and many-nodes numbers on one backend (each tree its own
    database: ``url`` and ``many_url``; None: SQLite)."""
    out: dict[str, object] = {}
    box = Sandbox.create(url)
    boxes.append(box)
    log("overhead")
    out["overhead"] = _overhead(box)
    log("approvals")
    out["approve"] = _approvals(box, "gated", unreachable=False)
    if url is not None:
        out["approve_remote"] = _approvals(box, "remote", unreachable=True)
    many = Sandbox.create(many_url)
    boxes.append(many)
    log("20 nodes x 50 steps")
    throughput.prepare(many)
    done = throughput.run(many)
    out["many"] = (done.seconds, sum(1 for s in done.statuses.values() if s == "completed"),
                   done.lock_errors + _lock_errors(many))
    return out


def run(keep: bool, log: object) -> tuple[list[Row], list[str]]:
    """Rows: each number on SQLite, then on PostgreSQL, with the targets."""
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
    say: Callable[[str], None] = log if callable(log) else (lambda _text: None)
    loops: dict[str, dict[str, object]] = {}
    try:
        for name in ("bench_loop", "bench_many"):
            cluster.admin(f"CREATE DATABASE {name}")
        for backend in ("sqlite", "postgres"):
            say(f"postgres part: the loop on {backend}")
            pg = backend == "postgres"
            loops[backend] = _loop_part(cluster.url("bench_loop") if pg else None,
                                        cluster.url("bench_many") if pg else None, boxes,
                                        lambda t, b=backend: say(f"  {b}: {t}"))
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
    rows += _loop_rows(loops)
    return rows, ["postgres: a local cluster on a Unix socket (fsync off); a server across "
                  "a network adds its round trips to every read and write"]


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def _loop_rows(loops: dict[str, dict[str, object]]) -> list[Row]:
    """The loop's numbers, SQLite's then PostgreSQL's, each with its target."""
    rows = [section(f"The loop on SQLite and on PostgreSQL ({OVERHEAD_ITERS} iterations x "
                    f"{OVERHEAD_STEPS} no-op steps; {GATES} approvals a series)")]
    sqlite_gap = sorted(_intervals(loops["sqlite"]).gap)
    base = sqlite_gap[len(sqlite_gap) // 2] if sqlite_gap else 0.0
    for backend in ("sqlite", "postgres"):
        got = _intervals(loops[backend])
        target = "< 10 ms" if backend == "sqlite" else f"< {1.3 * base:.1f} ms (1.3x SQLite)"
        rows.append(Row(f"per step: agent exit -> next spawned [{backend}]", got.gap,
                        target=target))
        rows.append(Row(f"  before start [{backend}]", got.before))
        rows.append(Row(f"  after end [{backend}]", got.after))
    for backend, key, label in (("sqlite", "approve", "approve -> next step [sqlite]"),
                                ("postgres", "approve", "approve -> next step [postgres]"),
                                ("postgres", "approve_remote",
                                 "  .wake unreachable: NOTIFY only [postgres]")):
        samples = loops[backend].get(key)
        if isinstance(samples, list):
            rows.append(Row(label, samples, target="p95 < 100 ms",
                            reference=f"p95 {_p95(samples):.0f} ms"))
    for backend in ("sqlite", "postgres"):
        seconds, completed, errors = loops[backend]["many"]  # type: ignore[misc]
        rows.append(Row(f"20 nodes x 50 steps at once [{backend}]", [], target="0 lock errors",
                        note=f"{seconds:.0f} s, {completed}/20 completed, {errors} lock errors"))
    return rows


def _intervals(loop: dict[str, object]) -> Intervals:
    got = loop["overhead"]
    assert isinstance(got, Intervals)
    return got
