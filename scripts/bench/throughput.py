"""Many nodes at once: 20 nodes started together, each 10 iterations of 5 no-op steps.

The clock starts before the first ``fractal node start`` (all are launched at the same
moment, one thread each) and stops when the last node has settled. Rows written are the
run, iteration, step and event rows these nodes added, counted in the database at the
end. Lock errors are every mention of a locked database in the nodes' ``supervisor.log``
files and in the recorded reasons of their rows, plus ``node start`` calls that failed
on one; the target is 0.
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from dataclasses import dataclass

from bench.sandbox import ROOT, SETTLED, BenchError, Sandbox

NODES, ITERATIONS, STEPS = 20, 10, 5
LOCKED = re.compile(r"database is locked|database table is locked|SQLITE_BUSY", re.I)


@dataclass(frozen=True)
class Throughput:
    """``seconds``: first start -> last settled; ``rows``: rows the run wrote; ``lock_errors``:
    mentions of a locked database; ``statuses``: node -> final status."""

    seconds: float
    rows: int
    lock_errors: int
    statuses: dict[str, str]

    @property
    def rows_per_second(self) -> float:
        return self.rows / self.seconds if self.seconds else 0.0


def names() -> list[str]:
    return [f"t{n:02d}" for n in range(1, NODES + 1)]


def prepare(box: Sandbox) -> None:
    """The 20 nodes: 5 one-line step files each, --no-sync, 10 iterations."""
    for name in names():
        box.add_node(name, steps=STEPS, max_iters=ITERATIONS)


def run(box: Sandbox, timeout: float = 300.0) -> Throughput:
    """Start every node at once, wait for all to settle, count rows and lock errors.
    Raises BenchError when a node does not settle in time."""
    branches = [f"{ROOT}.{n}" for n in names()]
    before = _rows(box, branches)
    failures: list[str] = []

    def start(name: str) -> None:
        try:
            box.cli("node", "start", name, timeout=timeout)
        except BenchError as exc:
            failures.append(str(exc))

    threads = [threading.Thread(target=start, args=(n,)) for n in names()]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    statuses: dict[str, str] = {}
    deadline = started + timeout
    while time.monotonic() < deadline:
        for name in names():
            status, pid = box.node_state(name)
            if pid is not None:
                box.note_supervisor(pid)
            statuses[name] = status
        if all(s in SETTLED for s in statuses.values()):
            break
        time.sleep(0.05)
    else:
        raise BenchError(f"throughput nodes did not settle in {timeout:.0f}s: {statuses}")
    seconds = time.monotonic() - started
    rows = _rows(box, branches) - before
    errors = sum(1 for f in failures if LOCKED.search(f)) + _lock_mentions(box, branches)
    if failures and not errors:
        raise BenchError(f"node start failed: {failures[0]}")
    return Throughput(seconds, rows, errors, statuses)


def _rows(box: Sandbox, branches: list[str]) -> int:
    marks = ",".join("?" * len(branches))
    total = 0
    for table in ("runs", "iterations", "steps", "events"):
        value = box.sql(f"SELECT COUNT(*) FROM {table} WHERE node IN ({marks})", *branches)
        total += int(str(value[0][0]))
    return total


def _lock_mentions(box: Sandbox, branches: list[str]) -> int:
    count = 0
    for branch in branches:
        log = box.repo / ".worktrees" / branch / ".fractal" / branch / "supervisor.log"
        with contextlib.suppress(OSError):
            count += len(LOCKED.findall(log.read_text(errors="replace")))
    marks = ",".join("?" * len(branches))
    for table in ("runs", "iterations", "steps", "events"):
        rows = box.sql(f"SELECT metadata FROM {table} WHERE node IN ({marks})", *branches)
        count += sum(1 for (meta,) in rows if LOCKED.search(str(meta)))
    return count
