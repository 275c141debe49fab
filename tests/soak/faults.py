"""What the fault scenarios share: their ``Outcome``, and small helpers to build work,
inject a fault and look at what it did (tests/soak/scenarios.py, storage.py).
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field

import psutil

from tests.e2e.fakes import make_fakes
from tests.helpers import wait_until
from tests.soak.harness import SETTLED, SoakTree
from tests.soak.invariants import NodeSnapshot, Violation, snapshot_node


@dataclass
class Outcome:
    """What a scenario did: faults injected, paused nodes to compare, failed expectations,
    and notes on where the fault landed."""

    faults: int = 0
    untouched: list[NodeSnapshot] = field(default_factory=list)
    problems: list[Violation] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def expect(self, ok: bool, what: str) -> None:
        """Record ``what`` as a failed expectation unless ``ok``."""
        if not ok:
            self.problems.append(Violation("expectation", what))


Scenario = Callable[[SoakTree, random.Random], Outcome]


def work(rng: random.Random, *, pace: float = 0.25, low: int = 2, high: int = 6) -> str:
    return f"[soak:chunks={rng.randint(low, high)}] [soak:pace={pace}]\n"


def kill(proc: psutil.Process) -> bool:
    """SIGKILL ``proc``; True if it was still alive to be killed."""
    try:
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        proc.send_signal(signal.SIGKILL)
        return True
    except psutil.Error:
        return False


def kill_agent(box: SoakTree, step_id: int, *, whole_group: bool) -> bool:
    """SIGKILL the agent of step ``step_id`` (its leader, or its whole group) if that step
    is still open and its leader is still the process recorded (pids wrap around fast on
    a busy machine); True when the signal was sent."""
    rows = box.sql("SELECT pgid, pgid_started FROM steps WHERE step_id = ? AND ended_at IS "
                   "NULL", step_id)
    if not rows or rows[0][0] is None:
        return False
    pgid, started = int(str(rows[0][0])), float(str(rows[0][1]))
    try:
        leader = psutil.Process(pgid)
        if abs(leader.create_time() - started) > 0.05:
            return False
        if whole_group:
            os.killpg(pgid, signal.SIGKILL)
        else:
            leader.send_signal(signal.SIGKILL)
    except (psutil.Error, ProcessLookupError):
        return False
    return True


def bystander(box: SoakTree, out: Outcome) -> None:
    box.pause_bystander()
    out.untouched.append(snapshot_node(box.repo, "main.bystander"))


def run_meta(box: SoakTree, name: str) -> str:
    rows = box.sql("SELECT metadata FROM runs WHERE node = ? ORDER BY run_id DESC LIMIT 1",
                   f"main.{name}")
    return str(rows[0][0]) if rows else ""


def kill_supervisor_then_heal(box: SoakTree, name: str, out: Outcome) -> None:
    """SIGKILL the node's supervisor, wait for its pane to go, heal with ``node list``."""
    supervisor = box.supervisor(name)
    if kill(supervisor):
        out.faults += 1
    wait_until(lambda: not box.session_alive(name), timeout=15, message="pane gone")
    box.heal()  # a lost supervisor parks its run (completed: it had ended already)
    status = box.wait_status(name, SETTLED | {"paused"}, timeout=30)
    out.expect(status in ("paused", "completed"), f"{name} ended {status}")


def use_fakes(box: SoakTree) -> None:
    """Put the fake ``claude`` (tests/stubs/fake_claude.py) first on the tree's PATH."""
    fakes = make_fakes(box.base, ("claude",))
    box.env["PATH"] = f"{fakes.bindir}{os.pathsep}{box.env.get('PATH', '')}"
    box.env["FAKE_CLI_DIR"] = str(fakes.state)


def dirty(box: SoakTree, name: str) -> str:
    """``git status --porcelain`` of the soak agent's files in the node's worktree."""
    return subprocess.run(["git", "status", "--porcelain", "--", "soak"],
                          cwd=box.worktree(name), capture_output=True, text=True,
                          check=False).stdout.strip()[:200]


def child_running(root: psutil.Process, needle: str) -> bool:
    with contextlib.suppress(psutil.Error):
        for child in root.children(recursive=True):
            with contextlib.suppress(psutil.Error):
                if needle in " ".join(child.cmdline()):
                    return True
    return False
