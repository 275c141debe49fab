"""Fault scenarios of the database and the disk: a writer holding the database locked, a
full ``tmp/``, an unwritable node directory, a stale git ``index.lock`` (see
scenarios.py for how a scenario runs).
"""

from __future__ import annotations

import random
import subprocess
import sys
import time

from tests.helpers import wait_until
from tests.soak.faults import Outcome, bystander, dirty, run_meta, work
from tests.soak.harness import SoakTree

_LOCKER = """
import sqlite3, sys, time, pathlib
con = sqlite3.connect(sys.argv[1], timeout=60, isolation_level=None)
con.execute("BEGIN EXCLUSIVE")
con.execute("INSERT INTO events (node, event, actor, status, metadata, created_at) "
            "VALUES ('main', 'soak', 'soak', 'completed', 'lock holder', '2000-01-01T00:00:00.000Z')")
pathlib.Path(sys.argv[2]).write_text("locked")
time.sleep(float(sys.argv[3]))
con.execute("ROLLBACK")
"""


def database_locked(box: SoakTree, rng: random.Random) -> Outcome:
    """Another process holds the database write lock (``BEGIN EXCLUSIVE``) for 5 s while
    a node runs; a read verb runs meanwhile. Nothing may fail on the lock."""
    out = Outcome()
    if rng.random() < 0.5:
        bystander(box, out)
    steps = {f"0{n}-S{n}.md": work(rng, pace=0.05, low=1, high=3) for n in range(1, 5)}
    box.node("busy", steps, "--max-iters", "3")
    box.cli("node", "start", "busy")
    box.wait_running("busy")
    time.sleep(rng.uniform(0, 1.0))  # the injection point
    ready = box.base / "locked"
    locker = subprocess.Popen([sys.executable, "-c", _LOCKER, str(box.db), str(ready), "5"])
    try:
        wait_until(ready.exists, timeout=30, message="the lock taken")
        out.faults += 1
        read = box.cli("node", "status", "busy", check=False)
        out.expect(read.returncode == 0, f"node status during the lock: {read.stderr.strip()}")
    finally:
        locker.wait(timeout=60)
    out.expect(box.wait_status("busy", timeout=90) == "completed",
               f"busy did not complete: {run_meta(box, 'busy')}")
    bad = box.sql("SELECT status, metadata FROM steps WHERE node = 'main.busy' "
                  "AND status != 'completed'")
    out.expect(not bad, f"steps that did not complete under the lock: {bad}")
    log = (box.node_dir("busy") / "supervisor.log").read_text(errors="replace")
    out.expect("locked" not in log, "supervisor.log mentions a locked database")
    return out


def full_tmp(box: SoakTree, rng: random.Random) -> Outcome:
    """The node's ``tmp/`` is a full filesystem when a failed step's stderr is saved."""
    out = Outcome()
    box.node("cramped", {"01-A.md": "[soak:chunks=1] [soak:fail=3]\n"}, "--no-sync",
             "--max-iters", "1", "--step-retries", str(rng.randint(0, 1)),
             "--step-retry-backoff", "1s")
    box.full_mount(box.node_dir("cramped") / "tmp")
    out.faults += 1
    box.cli("node", "start", "cramped")
    out.expect(box.wait_status("cramped") == "exited", "cramped did not exit")
    meta = run_meta(box, "cramped")
    out.expect(meta == "Reached max iterations (1); final iteration failed",
               f"cramped's run end is explained: {meta!r}")
    return out


def unwritable_node_dir(box: SoakTree, rng: random.Random) -> Outcome:
    """The node directory becomes unwritable before the start or while a step runs."""
    out = Outcome()
    box.node("locked", {"01-A.md": work(rng, pace=0.1), "02-B.md": work(rng, pace=0.1)},
             "--no-sync", "--max-iters", "2", "--step-retry-backoff", "1s")
    if rng.random() < 0.4:
        box.freeze(box.node_dir("locked"))
        out.faults += 1
        started = box.cli("node", "start", "locked", check=False)
        if started.returncode != 0:
            out.expect(started.stderr.startswith("Error: ") and "Traceback" not in
                       started.stderr, f"start's refusal is a clear error: {started.stderr!r}")
            out.expect(box.status("locked") == "idle", "a refused start leaves the node idle")
            return out
    else:
        box.cli("node", "start", "locked")
        box.wait_running("locked")
        time.sleep(rng.uniform(0, 0.8))  # the injection point
        box.freeze(box.node_dir("locked"))
        out.faults += 1
    status = box.wait_status("locked", timeout=90)
    meta = run_meta(box, "locked")
    out.expect(status in ("completed", "exited") and bool(meta),
               f"locked's run end is explained: {status} {meta!r}")
    return out


def index_lock_left(box: SoakTree, rng: random.Random) -> Outcome:
    """A stale ``index.lock`` in the node's git dir, before the start or mid-run."""
    out = Outcome()
    box.node("stale", {"01-A.md": work(rng, pace=0.1), "02-B.md": work(rng, pace=0.1)},
             "--no-sync", "--max-iters", "2")
    lock = box.gitdir("stale") / "index.lock"
    if rng.random() < 0.5:
        lock.write_text("")
        box.cli("node", "start", "stale")
    else:
        box.cli("node", "start", "stale")
        box.wait_running("stale")
        time.sleep(rng.uniform(0, 1.0))  # the injection point
        lock.write_text("")
    out.faults += 1
    out.expect(box.wait_status("stale") == "completed",
               f"stale did not complete: {run_meta(box, 'stale')}")
    left = dirty(box, "stale")
    out.expect(not left, f"the agent's work was committed: {left!r}")
    return out
