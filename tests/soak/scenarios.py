"""The fault scenarios of issue 8: each builds a tree, starts real supervisors, injects one
fault at a point its ``random.Random`` picks, lets the tree settle and heals it.

A scenario returns an ``Outcome`` (tests/soak/faults.py): how many faults it really
injected (a fault aimed at a process that had already finished is not counted),
snapshots of paused nodes that must come out untouched, and its own expectations that
failed (beyond the shared invariants of ``invariants.check_tree``, which the caller runs
afterwards). The sleeps here are the random injection points themselves, never
synchronisation (that is ``wait_until``). Faults of the database and the disk are in
storage.py.
"""

from __future__ import annotations

import contextlib
import random
import subprocess
import sys
import time

from tests.helpers import wait_until
from tests.soak.faults import (
    Outcome,
    Scenario,
    bystander,
    child_running,
    dirty,
    kill,
    kill_agent,
    kill_supervisor_then_heal,
    use_fakes,
    work,
)
from tests.soak.harness import SETTLED, SoakTree
from tests.soak.poolfaults import pool_dispatcher_killed
from tests.soak.storage import (
    database_locked,
    database_locked_long,
    disk_full,
    full_tmp,
    index_lock_left,
    unwritable_node_dir,
)
from tests.soak.treefaults import (
    checkout_removed,
    cleanup_killed,
    merge_killed,
    notify_misbehaves,
    supervisor_in_waits,
    tmux_server_killed_tree,
)

# -- SIGKILL of a supervisor --------------------------------------------------------------

def supervisor_mid_step(box: SoakTree, rng: random.Random) -> Outcome:
    """SIGKILL the supervisor while an agent writes; heal; the agent is reaped."""
    out = Outcome()
    if rng.random() < 0.5:
        bystander(box, out)
    sync = ("--no-sync",) if rng.random() < 0.5 else ()
    box.node("victim", {"01-A.md": work(rng), "02-B.md": work(rng)}, *sync, "--max-iters", "5")
    box.cli("node", "start", "victim")
    box.wait_running("victim")
    time.sleep(rng.uniform(0, 1.2))  # the injection point
    kill_supervisor_then_heal(box, "victim", out)
    return out


def supervisor_mid_setup(box: SoakTree, rng: random.Random) -> Outcome:
    """SIGKILL the supervisor while a slow setup.sh runs."""
    out = Outcome()
    setup = (f"echo setting up\nsleep {rng.uniform(2, 5):.2f}\n"
             "echo done >> setup-ran.txt\n")
    box.node("slowsetup", {"01-A.md": work(rng)}, "--no-sync", "--max-iters", "1", setup=setup)
    box.cli("node", "start", "slowsetup")
    supervisor = box.supervisor("slowsetup")
    wait_until(lambda: child_running(supervisor, "setup.sh"), timeout=30, message="setup runs")
    time.sleep(rng.uniform(0, 1.0))  # the injection point
    kill_supervisor_then_heal(box, "slowsetup", out)
    return out


def supervisor_mid_approval(box: SoakTree, rng: random.Random) -> Outcome:
    """SIGKILL the supervisor while a gated step awaits approval."""
    out = Outcome()
    gate = "---\nrequires_approval: true\n---\n" + work(rng, pace=0.05)
    box.node("gated", {"01-GATE.md": gate, "02-B.md": work(rng)}, "--no-sync",
             "--max-iters", "1")
    box.cli("node", "start", "gated")
    wait_until(lambda: box.sql("SELECT 1 FROM steps WHERE node = 'main.gated' AND "
                               "approved = '' AND ended_at IS NULL"), timeout=30,
               message="the gate to wait")
    time.sleep(rng.uniform(0, 1.5))  # the injection point
    kill_supervisor_then_heal(box, "gated", out)
    return out


def supervisor_mid_commit(box: SoakTree, rng: random.Random) -> Outcome:
    """SIGKILL mid-commit: the supervisor while ``fractal commit`` runs in the agent (or
    the agent's group itself, leaving the commit half done), or the supervisor during a
    large backstop commit."""
    out = Outcome()
    files = rng.randint(150, 400)
    variant = rng.choice(["agent-commit", "agent-commit-killed", "backstop"])
    if variant == "backstop":
        body, needle = f"[soak:files={files}]\n", "git"
    else:
        body = f"[soak:files={files}] [soak:commit=soak: bulk work] [soak:sleep=2]\n"
        needle = "fractal commit"
    box.node("committer", {"01-A.md": body}, "--no-sync", "--max-iters", "1",
             "--step-retries", "0")
    box.cli("node", "start", "committer")
    supervisor = box.supervisor("committer")
    lock = box.gitdir("committer") / "index.lock"
    with contextlib.suppress(AssertionError):  # the commit may be too quick to be seen
        wait_until(lambda: child_running(supervisor, needle) or lock.exists(), timeout=30,
                   interval=0.002, message="a commit in flight")
        if rng.random() < 0.7:  # land inside git's own critical section
            wait_until(lock.exists, timeout=5, interval=0.0005, message="index.lock taken")
    time.sleep(rng.uniform(0, 0.02))  # the injection point
    out.notes.append(f"{variant}: index.lock {'held' if lock.exists() else 'absent'} at the kill")
    if variant == "agent-commit-killed":
        running = box.running_step("committer")
        if running is not None and kill_agent(box, running[0], whole_group=True):
            out.faults += 1
        status = box.wait_status("committer")
        out.expect(status == "exited", f"committer ended {status}")
        left = dirty(box, "committer")
        out.expect(not left, f"the backstop committed what the killed commit left: {left}")
        return out
    kill_supervisor_then_heal(box, "committer", out)
    return out


def supervisor_mid_pause(box: SoakTree, rng: random.Random) -> Outcome:
    """SIGKILL the supervisor while it parks a run (``fractal node pause`` in flight)."""
    out = Outcome()
    box.node("parking", {"01-A.md": "[soak:chunks=2] [soak:sleep=30]\n"}, "--no-sync",
             "--max-iters", "1")
    box.cli("node", "start", "parking")
    box.wait_running("parking")
    supervisor = box.supervisor("parking")
    pause = subprocess.Popen([sys.executable, "-m", "fractal", "node", "pause", "parking"],
                             cwd=box.repo, env=box.env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: box.sql("SELECT 1 FROM signals WHERE node = 'main.parking' AND "
                                   "signal = 'pause'"), timeout=30, interval=0.002,
                   message="the pause signal")
        time.sleep(rng.uniform(0, 0.08))  # the injection point: somewhere in the parking
        if kill(supervisor):
            out.faults += 1
    finally:
        pause.wait(timeout=60)
    wait_until(lambda: not box.session_alive("parking"), timeout=15, message="pane gone")
    box.heal()
    status = box.wait_status("parking", SETTLED | {"paused"}, timeout=30)
    out.notes.append(f"the node ended {status}")
    return out


# -- the agent ----------------------------------------------------------------------------

def agent_killed(box: SoakTree, rng: random.Random) -> Outcome:
    """SIGKILL the agent (its leader, or its whole group) mid-step; the run carries on."""
    out = Outcome()
    box.node("prey", {"01-A.md": work(rng), "02-B.md": work(rng)}, "--no-sync",
             "--max-iters", "3", "--step-retry-backoff", "1s")
    box.cli("node", "start", "prey")
    for _attempt in range(3):  # a kill aimed at an agent that just finished: the next one
        step_id, _pgid = box.wait_running("prey")
        time.sleep(rng.uniform(0, 0.4))  # the injection point
        if kill_agent(box, step_id, whole_group=rng.random() < 0.5):
            out.faults += 1
            break
    status = box.wait_status("prey", timeout=60)
    out.expect(status in ("completed", "exited"), f"prey ended {status}")
    if out.faults:
        killed = box.sql("SELECT status, exit_code FROM steps WHERE node = 'main.prey' "
                         "AND exit_code = 137")
        out.expect(all(r == ("failed", 137) for r in killed),
                   f"a killed agent's step is recorded failed/137: {killed}")
    return out


def tmux_server_killed(box: SoakTree, rng: random.Random) -> Outcome:
    """``tmux kill-server`` while two nodes run (and one is parked)."""
    out = Outcome()
    if rng.random() < 0.6:
        bystander(box, out)
    for name in ("one", "two"):  # more iterations than the fault leaves them time for
        box.node(name, {"01-A.md": work(rng), "02-B.md": work(rng)}, "--no-sync",
                 "--max-iters", "50")
        box.cli("node", "start", name)
    box.wait_running("one")  # a start returns while its supervisor boots: both run first
    box.wait_running("two")
    time.sleep(rng.uniform(0, 1.5))  # the injection point
    if subprocess.run(["tmux", "-S", str(box.socket), "kill-server"], capture_output=True,
                      check=False).returncode == 0:
        out.faults += 1
    box.heal()
    for name in ("one", "two"):  # SIGHUP parks each run (completed: it had ended already)
        status = box.wait_status(name, SETTLED | {"paused"}, timeout=30)
        out.expect(status in ("paused", "completed"), f"{name} ended {status}")
    return out


def no_final_event(box: SoakTree, rng: random.Random) -> Outcome:
    """A claude that exits 0 (or 1) after a random number of lines, without its result."""
    out = Outcome()
    use_fakes(box)
    lines, code = rng.randint(0, 5), rng.choice([0, 0, 1])
    box.node("mute", {"01-A.md": f"[fake:claude-tool-success] [fake:truncate={lines}] "
                                 f"[fake:exit={code}]\n"},
             "--agent", "claude", "--no-sync", "--max-iters", "1", "--step-retries", "0")
    box.cli("node", "start", "mute")
    out.faults += 1
    out.expect(box.wait_status("mute") == "exited", "mute did not exit")
    rows = box.sql("SELECT status, exit_code, metadata FROM steps WHERE node = 'main.mute'")
    out.expect(len(rows) == 1 and rows[0][0] == "failed"
               and str(rows[0][2]).startswith(f"stream ended without a result (exit {code})"),
               f"mute's step is recorded as a missing result: {rows}")
    return out


def hangs_after_final(box: SoakTree, rng: random.Random) -> Outcome:
    """A claude that prints its final result, then never exits."""
    out = Outcome()
    use_fakes(box)
    fixture = rng.choice(["claude-text-only", "claude-tool-success"])
    box.node("lingers", {"01-A.md": f"[fake:{fixture}] [fake:hang-after]\n"},
             "--agent", "claude", "--no-sync", "--max-iters", "1", "--step-timeout", "2m")
    box.cli("node", "start", "lingers")
    out.faults += 1
    out.expect(box.wait_status("lingers") == "completed", "lingers did not complete")
    rows = box.sql("SELECT status, exit_code FROM steps WHERE node = 'main.lingers'")
    out.expect(rows == [("completed", 0)], f"the lingering step is recorded by its result: {rows}")
    return out


SCENARIOS: dict[str, Scenario] = {
    "supervisor-mid-step": supervisor_mid_step,
    "supervisor-mid-setup": supervisor_mid_setup,
    "supervisor-mid-approval": supervisor_mid_approval,
    "supervisor-mid-commit": supervisor_mid_commit,
    "supervisor-mid-pause": supervisor_mid_pause,
    "agent-killed": agent_killed,
    "tmux-kill-server": tmux_server_killed,
    "no-final-event": no_final_event,
    "hangs-after-final": hangs_after_final,
    "database-locked": database_locked,
    "database-locked-long": database_locked_long,
    "full-tmp": full_tmp,
    "disk-full": disk_full,
    "unwritable-node-dir": unwritable_node_dir,
    "index-lock-left": index_lock_left,
    "checkout-removed": checkout_removed,
    "merge-killed": merge_killed,
    "cleanup-killed": cleanup_killed,
    "notify-misbehaves": notify_misbehaves,
    "supervisor-in-waits": supervisor_in_waits,
    "tmux-kill-server-tree": tmux_server_killed_tree,
    "pool-dispatcher-killed": pool_dispatcher_killed,
}
"""Every scenario by name (``make soak`` runs them all)."""

NEEDS_ROOT = frozenset({"full-tmp", "disk-full"})
"""Scenarios that mount a filesystem: skipped, with the reason, when not root."""
