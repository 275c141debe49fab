"""The worker pool's dispatcher SIGKILLed mid-pool (see scenarios.py for how a scenario
runs; the sleeps are the random injection points).

A pool of 4 to 6 items, 2 or 3 workers at a time, each worker the soak agent writing
journaled chunks (one item may fail both its attempts). The pool node's supervisor (the
dispatcher: its DISPATCH step runs the ``fractal pool dispatch`` rounds) is SIGKILLed,
alone or together with the round in flight, at one of four points: during a dispatch
round, just after a claim (its worker not started yet), while a done worker is merged,
or during the REVIEW step. Then the heal parks the pool, ``fractal resume`` (or ``node
start --continue``) takes it up, and the pool must end ``pool: N done, M failed`` with
the invariants of ``invariants.check_pool``.
"""

from __future__ import annotations

import contextlib
import json
import random
import subprocess
import time

import psutil

from tests.helpers import wait_until
from tests.soak.faults import Outcome, child_running, kill, run_meta
from tests.soak.harness import SETTLED, SoakTree
from tests.soak.invariants import check_pool

POOL = "main.pool"
POINTS = ("round", "claim", "merge", "review")
_UNSTARTED = ("its worker never ran this attempt", "worker did not start")


def _rows(box: SoakTree, sql: str) -> list[tuple[object, ...]]:
    return box.sql(sql, POOL)


def _claim_pending(box: SoakTree, attempts: int) -> bool:
    """An item is claimed but its worker has not taken its node yet, once at least
    ``attempts`` attempts were claimed in all."""
    total = _rows(box, "SELECT COALESCE(SUM(attempts), 0) FROM pool_items WHERE pool = ?")
    if int(str(total[0][0])) < attempts:
        return False
    return bool(_rows(box, "SELECT 1 FROM pool_items p LEFT JOIN nodes n ON n.node = "
                           "p.worker WHERE p.pool = ? AND p.status = 'claimed' AND "
                           "(n.node IS NULL OR n.status = 'idle' OR n.supervisor_pid IS NULL)"))


def _landing(box: SoakTree, supervisor: psutil.Process) -> bool:
    """A claimed item's worker has completed and a dispatch round runs (it merges it)."""
    return bool(_rows(box, "SELECT 1 FROM pool_items p JOIN nodes n ON n.node = p.worker "
                           "WHERE p.pool = ? AND p.status = 'claimed' AND "
                           "n.status = 'completed'")) \
        and child_running(supervisor, "pool dispatch")


def _reviewing(box: SoakTree) -> bool:
    return bool(_rows(box, "SELECT 1 FROM steps WHERE node = ? AND step_name = 'REVIEW' "
                           "AND ended_at IS NULL"))


def _rounds(supervisor: psutil.Process) -> list[psutil.Process]:
    """The supervisor's dispatch rounds in flight (each in a session of its own)."""
    found = []
    with contextlib.suppress(psutil.Error):
        for child in supervisor.children(recursive=True):
            with contextlib.suppress(psutil.Error):
                if "pool dispatch" in " ".join(child.cmdline()):
                    found.append(child)
    return found


def _unstarted_claims(box: SoakTree) -> int:
    """Claims whose worker never ran, as the dispatcher announced them in the pool's
    transcript (each consumed an attempt without a worker run)."""
    text = ""
    for name in ("pane.log.1", "pane.log"):
        with contextlib.suppress(OSError):
            text += (box.node_dir("pool") / name).read_text(errors="replace")
    return sum(text.count(marker) for marker in _UNSTARTED)


def _aim(box: SoakTree, rng: random.Random, point: str, supervisor: psutil.Process,
         count: int) -> bool:
    """Wait for ``point`` and the random moment in it; False when it was never seen (the
    kill then lands wherever the pool is)."""
    try:
        if point == "round":
            wait_until(lambda: child_running(supervisor, "pool dispatch"), timeout=60,
                       interval=0.005, message="a dispatch round")
            time.sleep(rng.uniform(0, 0.3))  # the injection point
        elif point == "claim":
            nth = rng.randint(1, count)
            wait_until(lambda: _claim_pending(box, nth), timeout=120, interval=0.005,
                       message=f"claim {nth} before its worker runs")
        elif point == "merge":
            wait_until(lambda: _landing(box, supervisor), timeout=120, interval=0.005,
                       message="a done worker being merged")
            time.sleep(rng.uniform(0, 0.2))  # the injection point
        else:
            wait_until(lambda: _reviewing(box), timeout=240, interval=0.02,
                       message="the review step")
            time.sleep(rng.uniform(0, 1.5))  # the injection point
    except AssertionError:
        return False
    return True


def pool_dispatcher_killed(box: SoakTree, rng: random.Random) -> Outcome:
    """SIGKILL the pool's dispatcher mid-pool, heal, resume: no item worked by two runs at
    once, attempts exact, no item lost, the run ends with the pool's counts."""
    out = Outcome()
    count, width = rng.randint(4, 6), rng.randint(2, 3)
    failing = f"i{rng.randint(1, count)}" if rng.random() < 0.5 else ""
    items = box.base / "items.jsonl"
    items.write_text("".join(json.dumps({"id": f"i{n}", "input": "[soak:fail=3]"
                                         if f"i{n}" == failing else f"item {n}"}) + "\n"
                             for n in range(1, count + 1)))
    brief = box.base / "brief.md"
    brief.write_text("Write the files your step asks for.\n")
    box.cli("node", "pool", "pool", "--items", str(items), "--brief", str(brief),
            "--max-workers", str(width), "--agent", str(box.agent), "--step-retries", "0")
    ndir = box.node_dir("pool")
    (ndir / "worker-steps" / "00-WORK.md").write_text(
        f"[soak:chunks={rng.randint(1, 3)}] [soak:pace=0.3]\n")
    (ndir / "steps" / "01-REVIEW.md").write_text(
        f"[soak:chunks=1] [soak:sleep={rng.uniform(1, 3):.1f}]\n")
    for args in (["add", "-A"], ["commit", "-q", "--no-verify", "-m", "soak pool steps"]):
        subprocess.run(["git", *args], cwd=box.worktree("pool"), capture_output=True,
                       check=True)
    point, what = rng.choice(POINTS), rng.choice(["supervisor", "supervisor-and-round"])
    box.cli("node", "start", "pool")
    supervisor = box.supervisor("pool")
    seen = _aim(box, rng, point, supervisor, count)
    rounds = _rounds(supervisor) if what == "supervisor-and-round" else []
    if kill(supervisor):
        out.faults += 1
    for proc in rounds:
        kill(proc)
    out.notes.append(f"{count} items, width {width}, failing {failing or 'none'}; killed the "
                     f"{what} ({len(rounds)} round(s)) {'during' if seen else 'missing'} "
                     f"the {point}")
    wait_until(lambda: not box.session_alive("pool"), timeout=15, message="pane gone")
    box.heal()
    status = box.wait_status("pool", SETTLED | {"paused"}, timeout=60)
    out.notes.append(f"the pool read {status} after the heal")
    if status == "paused":
        again = box.cli("resume", check=False)
    elif status != "completed":
        again = box.cli("node", "start", "pool", "--continue", check=False)
    else:
        again = None
    if again is not None:
        out.expect(again.returncode == 0, f"the pool takes up again: {again.stderr.strip()}")
    status = box.wait_status("pool", timeout=300)
    out.expect(status == "completed", f"the pool ended {status}: {run_meta(box, 'pool')}")
    for (worker,) in box.sql("SELECT node FROM nodes WHERE node LIKE 'main.pool.%'"):
        box.wait_status(str(worker).removeprefix("main."), SETTLED | {"paused"}, timeout=60)
    unstarted = _unstarted_claims(box)
    out.notes.append(f"claims whose worker never ran: {unstarted}; items: "
                     f"{box.sql('SELECT item_id, status, attempts FROM pool_items')}")
    out.problems += check_pool(box.db, POOL, unstarted=unstarted, repo=box.repo)
    (reason,) = box.sql("SELECT metadata FROM runs WHERE node = ? ORDER BY run_id DESC "
                        "LIMIT 1", POOL)[0]
    out.expect(str(reason).startswith("pool: "), f"the pool's run ends with its counts: "
                                                 f"{reason!r}")
    return out
