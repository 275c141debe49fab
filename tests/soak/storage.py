"""Fault scenarios of the database and the disk: a writer holding the database locked, a
full ``tmp/``, an unwritable node directory, a stale git ``index.lock`` (see
scenarios.py for how a scenario runs).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

from tests.helpers import wait_until
from tests.soak.faults import Outcome, bystander, dirty, run_meta, work
from tests.soak.harness import SETTLED, SoakTree, keep_leftovers

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


LOCK_SECONDS_ENV = "FRACTAL_SOAK_LOCK_SECONDS"
"""How long ``database-locked-long`` holds the lock (default 30 s; shorter for a quick run)."""


def database_locked_long(box: SoakTree, rng: random.Random) -> Outcome:
    """Another process holds the database's write lock for FRACTAL_SOAK_LOCK_SECONDS
    (default 30 s) while a node runs; a writing verb meanwhile either gets through once
    the lock is let go or refuses saying the database is locked, never hanging. The loop
    waits and loses no row (every iteration and step row of its run is there)."""
    out = Outcome()
    hold = float(os.environ.get(LOCK_SECONDS_ENV, "30"))
    steps = {f"0{n}-S{n}.md": work(rng, pace=0.05, low=1, high=3) for n in range(1, 4)}
    box.node("busy", steps, "--no-sync", "--max-iters", "2")
    box.cli("node", "start", "busy")
    box.wait_running("busy")
    time.sleep(rng.uniform(0, 1.0))  # the injection point
    ready = box.base / "locked"
    locker = subprocess.Popen([sys.executable, "-c", _LOCKER, str(box.db), str(ready),
                               str(hold)])
    try:
        wait_until(ready.exists, timeout=30, message="the lock taken")
        out.faults += 1
        began = time.monotonic()
        verb = box.cli("radio", "post", "lock probe", "--subject", "lock probe", check=False,
                       timeout=hold + 60)
        took = time.monotonic() - began
        out.notes.append(f"radio post under a {hold:g}s lock: exit {verb.returncode} "
                         f"after {took:.1f}s: {verb.stderr.strip()[:200]}")
        out.expect(verb.returncode == 0 or ("locked by another process" in verb.stderr
                                            and "Traceback" not in verb.stderr),
                   f"the verb's refusal is clear: {verb.stderr.strip()[:300]!r}")
        out.expect(took < hold + 20, f"the verb hung {took:.0f}s under a {hold:g}s lock")
    finally:
        locker.wait(timeout=hold + 60)
    out.expect(box.wait_status("busy", timeout=120) == "completed",
               f"busy did not complete: {run_meta(box, 'busy')}")
    bad = box.sql("SELECT status, metadata FROM steps WHERE node = 'main.busy' "
                  "AND status != 'completed'")
    out.expect(not bad, f"steps that did not complete under the lock: {bad}")
    rows = box.sql("SELECT (SELECT COUNT(*) FROM iterations WHERE node = 'main.busy'), "
                   "(SELECT COUNT(*) FROM steps WHERE node = 'main.busy')")
    out.expect(rows == [(2, 6)], f"no row lost: 2 iterations of 3 steps, found {rows}")
    return out


def _onto_tmpfs(box: SoakTree, mib: int) -> None:
    """Move the (fresh) repository onto a ``mib`` MiB tmpfs mounted at its own path."""
    held = box.base / "repo.held"
    box.repo.rename(held)
    box.repo.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={mib}m", "tmpfs", str(box.repo)],
                   check=True, capture_output=True)
    box.mounts.append(box.repo)
    subprocess.run(["cp", "-a", f"{held}/.", str(box.repo)], check=True, capture_output=True)
    shutil.rmtree(held)


def _fill(path: Path) -> int:
    """Write zeros into ``path`` until the filesystem is full; the bytes written."""
    written = 0
    with contextlib.suppress(OSError), path.open("wb") as fh:
        while True:
            fh.write(b"\0" * 65536)
            fh.flush()
            written += 65536
    return written


def disk_full(box: SoakTree, rng: random.Random) -> Outcome:
    """The disk holding the whole tree (repository, worktrees, database) fills up while a
    node runs. What holds: the database passes ``integrity_check`` with no row
    half-written; the supervisor that cannot write ends (``supervisor.log`` names the full
    disk); once space is freed the heal parks the run, and ``fractal resume`` (or
    ``node start --continue`` after an end the loop could still record) finishes it."""
    out = Outcome()
    _onto_tmpfs(box, 64)
    steps = {"01-A.md": work(rng, pace=0.2), "02-B.md": work(rng, pace=0.2)}
    box.node("cramped", steps, "--no-sync", "--max-iters", "40", "--step-retry-backoff", "1s")
    box.cli("node", "start", "cramped")
    box.wait_running("cramped")
    time.sleep(rng.uniform(0, 2.0))  # the injection point
    filler = box.repo / ".git" / "filler"
    out.notes.append(f"filled the disk with {_fill(filler) >> 20} MiB")
    out.faults += 1
    supervisor = box.supervisor("cramped")
    with contextlib.suppress(AssertionError):  # a loop may also ride it out, retrying
        wait_until(lambda: not supervisor.is_running()
                   or box.status("cramped") in SETTLED | {"paused"}, timeout=60,
                   message="the loop to end on the full disk")
    check = box.sql("PRAGMA integrity_check")
    out.expect(check == [("ok",)], f"integrity_check on the full disk: {check}")
    filler.unlink()
    box.heal()
    status = box.status("cramped")
    reason = run_meta(box, "cramped")
    log = (box.node_dir("cramped") / "supervisor.log").read_text(errors="replace")
    said = any(text in f"{reason}\n{log}" for text in ("disk is full", "No space left"))
    out.notes.append(f"cramped ended {status}: {reason!r}; the log names the disk: {said}")
    config = box.node_dir("cramped") / "config.json"  # re-read at each iteration's top
    config.write_text(json.dumps({**box.config("cramped"), "max_iters": 2}))
    if status == "active":  # it rode the full disk out: it ends by itself now
        out.expect(box.wait_status("cramped", timeout=240) == "completed",
                   f"cramped ended {box.status('cramped')}: {run_meta(box, 'cramped')}")
        return out
    if status == "paused":  # its supervisor could not write: the heal parked it
        out.expect(said, f"supervisor.log says the disk is full: {reason!r}")
        again = box.cli("resume", check=False)
    else:
        keep_leftovers(box.worktree("cramped"))  # under the worktree's commit turn
        again = box.cli("node", "start", "cramped", "--continue", check=False)
    out.expect(again.returncode == 0, f"the run continues once space is freed: "
                                      f"{again.stderr.strip()[:300]}")
    if again.returncode == 0:
        out.expect(box.wait_status("cramped", timeout=240) == "completed",
                   f"cramped ended {box.status('cramped')}: {run_meta(box, 'cramped')}")
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
