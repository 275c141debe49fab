"""Fault scenarios of the tree's own paths: a checkout removed behind a running loop, a
merge or a cleanup verb SIGKILLed half-way, a notify command that misbehaves, a supervisor
SIGKILLed in one of its waits, ``tmux kill-server`` under ten running nodes (see
scenarios.py for how a scenario runs; the sleeps are the random injection points).
"""

from __future__ import annotations

import contextlib
import json
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from tests.helpers import wait_until
from tests.soak.faults import Outcome, bystander, kill_supervisor_then_heal, run_meta, work
from tests.soak.harness import SETTLED, SoakTree
from tests.soak.invariants import tree_processes


def git(cwd: Path, *args: str, check: bool = True) -> str:
    """git in ``cwd``; its stripped stdout (with ``check``, a failure raises)."""
    proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise AssertionError(f"git {' '.join(args)}: {proc.stderr.strip()}")
    return proc.stdout.strip()


def add_node(box: SoakTree, dotted: str, steps: dict[str, str], *opts: str) -> None:
    """``fractal node init`` of ``main.<dotted>`` (its parent from the dots) with ``steps``,
    committed on its branch."""
    parent, _, name = dotted.rpartition(".")
    box.cli("node", "init", name, *(("--parent", f"main.{parent}") if parent else ()), *opts)
    ndir = box.node_dir(dotted)
    for old in (ndir / "steps").iterdir():
        old.unlink()
    for filename, body in steps.items():
        (ndir / "steps" / filename).write_text(body)
    (ndir / "NODE.md").write_text(box.node_md)
    git(box.worktree(dotted), "add", "-A")
    git(box.worktree(dotted), "commit", "-q", "-m", "test setup", "--no-verify")


def _fractal(box: SoakTree, *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "fractal", *args], cwd=box.repo,
                            env=box.env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


def _strike(proc: subprocess.Popen[bytes], delay: float) -> bool:
    """SIGKILL ``proc`` after ``delay`` s; True when it was still running then."""
    time.sleep(delay)  # the injection point
    alive = proc.poll() is None
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    return alive


def _head(box: SoakTree, ref: str) -> str:
    return git(box.repo, "rev-parse", "--verify", "-q", ref, check=False).strip()


def _tree_files(box: SoakTree, ref: str, under: str) -> dict[str, str]:
    """``{path: blob sha}`` of ``ref``'s files under ``under`` ({} for a missing ref)."""
    out = git(box.repo, "ls-tree", "-r", ref, "--", under, check=False)
    files = {}
    for line in out.splitlines():
        meta, _, path = line.partition("\t")
        files[path] = meta.split()[2]
    return files


def _forget_journal(box: SoakTree, worktree: Path) -> None:
    """Drop the journal lines of a worktree the scenario removed on purpose."""
    if not box.journal.exists():
        return
    kept = [line for line in box.journal.read_text().splitlines()
            if line.strip() and json.loads(line)["worktree"] != str(worktree)]
    box.journal.write_text("".join(f"{line}\n" for line in kept))


# -- a checkout removed behind the loop's back ----------------------------------------------

def checkout_removed(box: SoakTree, rng: random.Random) -> Outcome:
    """``rm -rf`` of a running node's worktree, or ``git update-ref -d`` of its branch: the
    node ends ``exited`` (then ``missing``) with that reason; a sibling runs on to its end
    and a paused bystander keeps its rows, head and files."""
    out = Outcome()
    bystander(box, out)
    box.node("doomed", {"01-A.md": work(rng, pace=0.2), "02-B.md": work(rng, pace=0.2)},
             "--no-sync", "--max-iters", "30", "--step-retry-backoff", "1s")
    box.node("neighbour", {"01-A.md": work(rng, pace=0.1)}, "--no-sync", "--max-iters", "3")
    box.cli("node", "start", "doomed")
    box.cli("node", "start", "neighbour")
    box.wait_running("doomed")
    time.sleep(rng.uniform(0, 1.5))  # the injection point
    what = rng.choice(["worktree", "branch"])
    worktree = box.worktree("doomed")
    if what == "worktree":
        for _ in range(10):  # the agent may be writing into it
            subprocess.run(["rm", "-rf", str(worktree)], capture_output=True, check=False)
            if not worktree.exists():
                break
    else:
        git(box.repo, "update-ref", "-d", "refs/heads/main.doomed")
    out.faults += 1
    out.notes.append(f"removed the {what}")
    status = box.wait_status("doomed", SETTLED | {"missing"}, timeout=90)
    box.heal()
    status = box.status("doomed")
    out.expect(status in ("exited", "missing"), f"doomed ended {status}")
    reason = run_meta(box, "doomed")
    out.expect(f"the node's {what} is gone" in reason, f"doomed's run end names it: {reason!r}")
    out.expect(box.wait_status("neighbour", timeout=90) == "completed",
               f"neighbour did not complete: {run_meta(box, 'neighbour')}")
    stray = git(box.repo, "status", "--porcelain", "--", "soak", check=False).strip()
    out.expect(not stray, f"nothing was written into the main checkout: {stray[:200]}")
    _forget_journal(box, worktree)
    return out


# -- merge, delete, reset, destroy killed half-way ------------------------------------------

def merge_killed(box: SoakTree, rng: random.Random) -> Outcome:
    """SIGKILL ``fractal node merge`` at a random point: the target (a node, or the root's
    checkout) is untouched or fully merged, never half; a rerun completes the merge."""
    out = Outcome()
    into_root = rng.random() < 0.4
    add_node(box, "lead", {"01-A.md": work(rng, pace=0)}, "--no-sync", "--max-iters", "1")
    child = "kid" if into_root else "lead.kid"
    add_node(box, child, {"01-A.md": f"[soak:files={rng.randint(20, 120)}] "
                                     f"{work(rng, pace=0)}"}, "--no-sync", "--max-iters", "1")
    box.cli("node", "start", child.split(".")[-1] if into_root else child)
    box.wait_status(child)
    target = "main" if into_root else "main.lead"
    checkout = box.repo if into_root else box.worktree("lead")
    before = _head(box, target)
    expected = _tree_files(box, f"main.{child}", f"soak/main.{child}")
    merge = _fractal(box, "node", "merge", f"main.{child}")
    if _strike(merge, rng.uniform(0, 2.5)):
        out.faults += 1
    after = _head(box, target)
    landed = _tree_files(box, target, f"soak/main.{child}")
    out.notes.append(f"merge into {target} killed: target {'moved' if after != before else 'untouched'}")
    out.expect(landed in ({}, expected), f"{target} holds {len(landed)} of the child's "
                                         f"{len(expected)} files (half a merge)")
    out.expect((after == before) == (landed == {}), f"{target}'s head and files disagree")
    dirty = git(checkout, "status", "--porcelain", "--untracked-files=no", check=False).strip()
    out.expect(not dirty, f"{target}'s checkout is left with changes: {dirty[:200]}")
    again = box.cli("node", "merge", f"main.{child}", check=False)
    out.expect(again.returncode == 0, f"the rerun of the merge: {again.stderr.strip()}")
    out.expect(_tree_files(box, target, f"soak/main.{child}") == expected,
               f"after the rerun {target} holds the child's work")
    return out


def _rescues(box: SoakTree, branch: str) -> list[str]:
    return git(box.repo, "for-each-ref", "--format=%(refname)",
               f"refs/fractal/rescue/{branch}/", check=False).split()


def _saved(box: SoakTree, branch: str) -> set[tuple[str, str]]:
    """(path, blob sha) of ``branch``'s soak files as saved by its rescue refs (any)."""
    files: set[tuple[str, str]] = set()
    for ref in _rescues(box, branch):
        files |= set(_tree_files(box, ref, f"soak/{branch}").items())
    return files


def _own(box: SoakTree, name: str) -> set[tuple[str, str]]:
    """(path, blob sha) of the node's soak files: committed on its branch, and on disk in
    its worktree (uncommitted work included)."""
    files = set(_tree_files(box, f"main.{name}", f"soak/main.{name}").items())
    worktree = box.worktree(name)
    for path in sorted((worktree / "soak" / f"main.{name}").rglob("*")):
        if path.is_file():
            sha = git(worktree, "hash-object", str(path))
            files.add((str(path.relative_to(worktree)), sha))
    return files


def cleanup_killed(box: SoakTree, rng: random.Random) -> Outcome:
    """SIGKILL ``delete --force``, ``reset --force`` or ``destroy --force`` half-way: every
    node already (partly) removed has a rescue ref holding all its files, committed and
    uncommitted, byte for byte (same blobs); a rerun of the verb completes, and still
    nothing is lost."""
    out = Outcome()
    verb = rng.choice(["delete", "reset", "destroy"])
    names = ["alpha", "beta", "gamma"]
    for name in names:
        box.node(name, {"01-A.md": work(rng, pace=0)}, "--no-sync", "--max-iters", "1")
        box.cli("node", "start", name)
    add_node(box, "alpha.sub", {"01-A.md": work(rng, pace=0)}, "--no-sync", "--max-iters", "1")
    box.cli("node", "start", "alpha.sub")
    every = [*names, "alpha.sub"]
    for name in every:
        box.wait_status(name)
    for name in every:  # uncommitted work a rescue must keep
        extra = box.worktree(name) / "soak" / f"main.{name}" / "uncommitted.txt"
        extra.write_text(f"left by the operator in {name}\n")
    own = {name: _own(box, name) for name in every}
    argv = {"delete": ("node", "delete", "main.alpha", "--force"),
            "reset": ("reset", "--force"), "destroy": ("destroy", "--force")}[verb]
    scope = ["alpha", "alpha.sub"] if verb == "delete" else every
    if _strike(_fractal(box, *argv), rng.uniform(0.2, 3.0)):
        out.faults += 1

    def check(when: str) -> None:
        for name in scope:
            gone = not (box.worktree(name) / ".git").exists() or not _head(box, f"main.{name}")
            if gone:  # removed, wholly or in part: its rescue ref came first
                out.expect(bool(_rescues(box, f"main.{name}")),
                           f"{when}: main.{name} was removed without a rescue ref")
                lost = own[name] - _saved(box, f"main.{name}")
                out.expect(not lost, f"{when}: main.{name} was removed but its rescue refs "
                                     f"lack (or hold other bytes of) {sorted(lost)[:3]}")
    check(f"{verb} killed")
    if verb != "destroy":
        box.heal()
        out.notes.append("after the kill: " + ", ".join(
            f"{n}={box.status(n)}" for n in scope))
    again = box.cli(*argv, check=False)
    out.expect(again.returncode == 0, f"the rerun of {verb}: {again.stderr.strip()[:300]}")
    check(f"{verb} rerun")
    for name in scope:
        out.expect(not box.worktree(name).exists(), f"main.{name}'s worktree is left")
    if verb == "destroy":  # the checker needs a tree: make it again
        box.cli("init", "--agent", str(box.agent))
    for name in scope:
        _forget_journal(box, box.worktree(name))
    return out


# -- a notify command that misbehaves -------------------------------------------------------

_HOSTILE = {
    "hangs": "sleep 600",
    "floods": "yes flood | head -c 50000000; exit 3",
    "ignores-term": "trap '' TERM; while :; do sleep 1; done",
    "leaves-a-child": "(trap '' TERM; sleep 600) & exit 0",
}


def notify_misbehaves(box: SoakTree, rng: random.Random) -> Outcome:
    """The root config's ``notify`` command hangs, floods its output, ignores SIGTERM or
    leaves a child behind: the loop is never held up, and nothing of it keeps running
    once the watcher is done."""
    out = Outcome()
    kind = rng.choice(sorted(_HOSTILE))
    box.cli("inbox", "notify", _HOSTILE[kind])
    box.env["FRACTAL_NOTIFY_IDLE_S"] = "1"
    box.node("noisy", {"01-A.md": "[soak:chunks=1] [soak:fail=2]\n"}, "--no-sync",
             "--max-iters", "1", "--step-retries", "0")
    started = time.monotonic()
    box.cli("node", "start", "noisy")
    out.faults += 1
    out.notes.append(f"notify {kind}")
    out.expect(box.wait_status("noisy", timeout=60) == "exited", "noisy did not exit")
    took = time.monotonic() - started
    out.expect(took < 30, f"the run took {took:.0f}s with a {kind} notify command")
    delivered = wait_until(lambda: box.sql("SELECT status FROM notifications WHERE status "
                                           "IS NOT NULL AND status != 'claimed'"),
                           timeout=60, message="a notification settled")
    out.notes.append(f"notifications: {delivered}")

    def quiet() -> bool:
        return not [p for p in tree_processes(box.repo) if "node _run" not in p.cmdline]
    with contextlib.suppress(AssertionError):  # the no-process invariant reports leftovers
        wait_until(quiet, timeout=60, message="the watcher and its command to end")
    return out


# -- a supervisor SIGKILLed in one of its waits ---------------------------------------------

def supervisor_in_waits(box: SoakTree, rng: random.Random) -> Outcome:
    """SIGKILL a supervisor waiting out a usage window, waiting for its children, or
    parking after an interruption (SIGHUP): healed to ``paused``, and ``fractal resume``
    finishes the run."""
    out = Outcome()
    wait = rng.choice(["usage-window", "children", "interrupted"])
    out.notes.append(f"killed while {wait}")
    if wait == "usage-window":
        flag = box.base / "window-closed"
        flag.write_text(str(int(time.time()) + 8))
        box.node("waiter", {"01-A.md": f"[soak:chunks=1] [soak:usage-file={flag}]\n"},
                 "--no-sync", "--max-iters", "1")
        box.cli("node", "start", "waiter")
        wait_until(lambda: box.sql("SELECT 1 FROM events WHERE node = 'main.waiter' AND "
                                   "metadata LIKE '%usage%'"), timeout=30,
                   message="the usage-window wait")
        time.sleep(rng.uniform(0, 2))
        flag.unlink()
        kill_supervisor_then_heal(box, "waiter", out)
    elif wait == "children":
        box.node("waiter", {"01-WAIT.md": "---\nwait: children\n---\n[soak:chunks=1]\n"},
                 "--no-sync", "--max-iters", "1")
        release = box.base / "release"
        add_node(box, "waiter.kid", {"01-A.md": f"[soak:chunks=1] [soak:wait-file={release}]\n"},
                 "--no-sync", "--max-iters", "1")
        box.cli("node", "start", "main.waiter.kid")
        box.wait_running("waiter.kid")
        box.cli("node", "start", "waiter")
        wait_until(lambda: box.sql("SELECT 1 FROM steps WHERE node = 'main.waiter' AND "
                                   "ended_at IS NULL"), timeout=30, message="the children wait")
        time.sleep(rng.uniform(0, 1.5))
        kill_supervisor_then_heal(box, "waiter", out)
        release.write_text("go")
        box.wait_status("waiter.kid", timeout=60)
    else:
        box.node("waiter", {"01-A.md": "[soak:chunks=2] [soak:sleep=4]\n"}, "--no-sync",
                 "--max-iters", "1")
        box.cli("node", "start", "waiter")
        box.wait_running("waiter")
        supervisor = box.supervisor("waiter")
        with contextlib.suppress(psutil.Error):
            supervisor.send_signal(signal.SIGHUP)
        time.sleep(rng.uniform(0, 0.3))  # somewhere in the parking
        kill_supervisor_then_heal(box, "waiter", out)
    status = box.status("waiter")
    if status == "paused":
        resumed = box.cli("resume", check=False)
        out.expect(resumed.returncode == 0, f"fractal resume: {resumed.stderr.strip()}")
        status = box.wait_status("waiter", timeout=90)
    out.expect(status == "completed", f"waiter ended {status}: {run_meta(box, 'waiter')}")
    return out


# -- tmux kill-server under a tree of ten ---------------------------------------------------

def _heads(box: SoakTree, names: list[str]) -> dict[str, str]:
    return {name: _head(box, f"main.{name}") for name in names}


def _committed_by_paused(box: SoakTree, name: str) -> tuple[list[str], int]:
    """Files of the node's ``paused`` steps (the agent names them ``<step id>-<k>.txt``)
    committed on its branch, and how many of them are in its worktree."""
    steps = {str(s) for (s,) in box.sql("SELECT step_id FROM steps WHERE node = ? AND "
                                        "status = 'paused'", f"main.{name}")}
    listed = git(box.repo, "ls-tree", "-r", "--name-only", f"main.{name}", "--",
                 f"soak/main.{name}", check=False).split()
    on_disk = [p for p in (box.worktree(name) / "soak" / f"main.{name}").glob("*-*.txt")
               if p.name.split("-", 1)[0] in steps]
    return [p for p in listed if Path(p).name.split("-", 1)[0] in steps], len(on_disk)


def tmux_server_killed_tree(box: SoakTree, rng: random.Random) -> Outcome:
    """``tmux kill-server`` under ten running nodes (two levels): every node parks, the
    interruption commits nothing (neither the heal nor the parking: the files of each
    interrupted step stay uncommitted), and ``fractal resume`` brings every one back to
    its end."""
    out = Outcome()
    names = [f"n{i}" for i in range(6)] + ["n0.a", "n0.b", "n1.a", "n2.a"]
    go = box.base / "go"  # every node is mid-step once all have started
    first = f"[soak:chunks=1] [soak:wait-file={go}] " + work(rng, pace=0.3)
    for name in names:
        add_node(box, name, {"01-A.md": first, "02-B.md": work(rng, pace=0.3)},
                 "--no-sync", "--max-iters", "2")
    for name in names:
        box.cli("node", "start", f"main.{name}")
    for name in names:
        box.wait_running(name, timeout=120)
    go.write_text("go")
    time.sleep(rng.uniform(0, 3))  # the injection point
    if subprocess.run(["tmux", "-S", str(box.socket), "kill-server"], capture_output=True,
                      check=False).returncode == 0:
        out.faults += 1
    for name in names:
        def gone(node: str = name) -> bool:
            return not box.session_alive(node)
        wait_until(gone, timeout=30, message=f"{name}'s pane gone")
    deadline = time.monotonic() + 30
    while any(" node _run" in p.cmdline for p in tree_processes(box.repo)) \
            and time.monotonic() < deadline:
        time.sleep(0.2)
    parked = _heads(box, names)
    box.heal()
    statuses = {name: box.status(name) for name in names}
    out.notes.append(f"after the kill: {statuses}")
    out.expect(all(s in ("paused", "completed") for s in statuses.values()),
               f"every node parked (or had ended): {statuses}")
    out.expect(_heads(box, names) == parked, "the heal committed something")
    kept = 0
    for name in names:  # what the interrupted steps wrote stays uncommitted
        held, on_disk = _committed_by_paused(box, name)
        kept += on_disk
        out.expect(not held, f"the interruption committed {name}'s interrupted step's "
                             f"files: {held[:3]}")
    out.notes.append(f"files of interrupted steps left uncommitted on disk: {kept}")
    resumed = box.cli("resume", check=False)
    out.expect(resumed.returncode == 0, f"fractal resume: {resumed.stderr.strip()}")
    for name in names:
        status = box.wait_status(name, timeout=120)
        out.expect(status == "completed", f"{name} ended {status}: {run_meta(box, name)}")
    return out

