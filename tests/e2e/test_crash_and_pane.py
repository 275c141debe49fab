"""A supervisor that dies or loses its host parks its run in a recorded, explained,
resumable state with nothing left running; the tmux pane shows the banners and the
agent's output."""

from __future__ import annotations

import os
import signal
import subprocess

import pytest

from tests.e2e.conftest import Tree
from tests.helpers import git, group_alive, pid_alive, wait_until

pytestmark = pytest.mark.e2e


def _open_step(tree: Tree) -> tuple[int, int] | None:
    rows = tree.sql("SELECT step_id, pgid FROM steps WHERE ended_at IS NULL AND pgid IS NOT NULL")
    return (int(rows[0][0]), int(rows[0][1])) if rows else None


def _ignores_term(pgid: int) -> bool:
    """Whether a process of group ``pgid`` has SIGTERM ignored (its ``SigIgn`` mask in
    ``/proc``): the stub agent sets it as it starts, after its step row is open."""
    for proc in os.listdir("/proc"):
        if not proc.isdigit():
            continue
        try:
            if os.getpgid(int(proc)) != pgid:
                continue
            with open(f"/proc/{proc}/status", encoding="utf-8") as fh:
                status = fh.read()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("SigIgn:") and int(line.split()[1], 16) & (1 << (signal.SIGTERM - 1)):
                return True
    return False


def test_sigkilled_supervisor_is_healed_on_the_next_read(tree: Tree) -> None:
    """A SIGKILLed supervisor is an interruption: the next read parks its run (rows open,
    the step ``paused``, spend kept), reaps the agent, commits nothing."""
    steps = {"01-WORK.md": "[stub:write=half-done.txt:draft] [stub:cost=0.2] [stub:hang]"}
    tree.node("victim", steps, "--no-sync", "--max-iters", "1")
    tree.cli("node", "start", "victim")
    _, pgid = wait_until(lambda: _open_step(tree), timeout=20, message="step running")
    wait_until(lambda: (tree.worktree("victim") / "half-done.txt").exists(), timeout=10)
    wait_until(lambda: tree.sql("SELECT 1 FROM steps WHERE cost = 0.2"), timeout=10,
               message="the reported cost recorded")  # the agent's line, read by the loop
    (sup,), = tree.sql("SELECT supervisor_pid FROM nodes WHERE node = 'main.victim'")
    os.kill(int(sup), signal.SIGKILL)
    wait_until(lambda: not pid_alive(int(sup)), timeout=10)

    listing = tree.cli("node", "list", "--csv").stdout
    assert "main.victim,paused" in listing
    assert tree.status("victim") == "paused"
    assert tree.sql("SELECT COUNT(*) FROM steps WHERE ended_at IS NULL") == [(0,)]
    assert tree.sql("SELECT COUNT(*) FROM iterations WHERE ended_at IS NULL") == [(1,)]
    assert tree.sql("SELECT status, ended_at FROM runs") == [("active", None)]
    assert tree.sql("SELECT subject FROM messages WHERE node = 'main.victim'") == [
        ("run 1 parked: interrupted: supervisor lost",)]
    (st, cost, smeta), = tree.sql("SELECT status, cost, metadata FROM steps")
    assert (st, cost, smeta) == ("paused", 0.2, "interrupted: supervisor lost")
    assert tree.sql("SELECT event, metadata FROM events WHERE event = 'orphan'") == [
        ("orphan", f"reaped pgid {pgid}")]
    wait_until(lambda: not group_alive(pgid), timeout=10, message="agent group reaped")
    # The agent's work is still on disk, never lost, and nothing was committed.
    assert (tree.worktree("victim") / "half-done.txt").read_text() == "draft\n"
    assert "half-done.txt" not in git(tree.repo, "ls-tree", "-r", "--name-only", "main.victim")


def test_a_heal_cut_short_is_done_again_by_the_next_read(tree: Tree) -> None:
    """The reading command that heals is killed mid-heal (while the agent it reaps
    ignores SIGTERM): the node stays active with its rows open, and the next read heals
    it whole: rows closed, one exit notice, no process left."""
    import sys

    tree.node("twice", {"01-WORK.md": "[stub:ignore-term] [stub:hang]"}, "--no-sync")
    tree.cli("node", "start", "twice")
    _, pgid = wait_until(lambda: _open_step(tree), timeout=20, message="step running")
    # the row opens before the agent ignores TERM: a heal's TERM in between ends it at once
    wait_until(lambda: _ignores_term(pgid), timeout=20, message="the agent ignoring TERM")
    (sup,), = tree.sql("SELECT supervisor_pid FROM nodes WHERE node = 'main.twice'")
    os.kill(int(sup), signal.SIGKILL)
    wait_until(lambda: not pid_alive(int(sup)), timeout=10)
    lock = tree.repo / ".worktrees" / ".heal-main.twice.lock"
    reader = subprocess.Popen([sys.executable, "-m", "fractal", "node", "list"], cwd=tree.repo,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_until(lock.exists, timeout=20, message="the heal started")
    reader.kill()  # mid-heal: the agent ignores TERM, so the reap takes its 2 s grace
    reader.wait(timeout=10)
    assert tree.status("twice") == "active"
    assert tree.sql("SELECT COUNT(*) FROM messages") == [(0,)]

    assert "main.twice,paused" in tree.cli("node", "list", "--csv").stdout
    assert tree.sql("SELECT COUNT(*) FROM steps WHERE ended_at IS NULL") == [(0,)]
    assert tree.sql("SELECT status, ended_at FROM runs") == [("active", None)]
    assert tree.sql("SELECT subject FROM messages") == [
        ("run 1 parked: interrupted: supervisor lost",)]
    wait_until(lambda: not group_alive(pgid), timeout=10, message="agent group reaped")


def test_killed_tmux_session_parks_the_run_and_commits_nothing(tree: Tree) -> None:
    escapee = tree.repo.parent / "escapee.pid"
    steps = {"01-WORK.md": f"[stub:write=wip.txt:in progress] [stub:setsid-child={escapee}] "
                           "[stub:hang]"}
    tree.node("hup", steps, "--no-sync", "--max-iters", "1")
    tree.cli("node", "start", "hup")
    _, pgid = wait_until(lambda: _open_step(tree), timeout=20, message="step running")
    wait_until(lambda: (tree.worktree("hup") / "wip.txt").exists(), timeout=10)
    # the agent writes the escapee's pid just after wip.txt: the kill comes after both
    wait_until(lambda: escapee.exists() and escapee.read_text().strip(), timeout=10,
               message="escapee started")
    (session, socket), = tree.sql("SELECT tmux_session, tmux_socket FROM nodes "
                                  "WHERE node = 'main.hup'")
    subprocess.run(["tmux", "-S", str(socket), "kill-session", "-t", f"={session}"], check=True)
    wait_until(lambda: tree.status("hup") == "paused", timeout=30, message="parked")
    assert tree.sql("SELECT COUNT(*) FROM steps WHERE ended_at IS NULL") == [(0,)]
    assert tree.sql("SELECT status, metadata FROM steps") == [("paused", "interrupted: SIGHUP")]
    assert tree.sql("SELECT status, ended_at FROM runs") == [("active", None)]
    wait_until(lambda: not group_alive(pgid), timeout=10, message="agent group ended")
    assert "wip.txt" not in git(tree.repo, "ls-tree", "-r", "--name-only", "main.hup")
    assert (tree.worktree("hup") / "wip.txt").read_text() == "in progress\n"
    pid = int(escapee.read_text())  # a process the agent started in a session of its own
    wait_until(lambda: not pid_alive(pid), timeout=10,
               message="nothing the loop started outlives it")


def test_pane_shows_banners_and_agent_output(tree: Tree) -> None:
    steps = {"01-HELLO.md": "[stub:cost=0.05]", "02-WAIT.md": "[stub:sleep=30]"}
    tree.node("pane", steps, "--no-sync", "--max-iters", "1", "--step-timeout", "5s")
    tree.cli("node", "start", "pane")
    (session, socket), = tree.sql("SELECT tmux_session, tmux_socket FROM nodes "
                                  "WHERE node = 'main.pane'")

    def pane() -> str:
        out = subprocess.run(["tmux", "-S", str(socket), "capture-pane", "-p", "-J", "-S", "-200",
                              "-t", f"={session}:"], capture_output=True, text=True, check=False)
        return out.stdout if "Step 2/2 (WAIT) ---" in out.stdout else ""

    text = wait_until(pane, timeout=20, message="pane shows step 2")
    assert "=== Iteration 1 of 1 at " in text
    assert "--- Step 1/2 (HELLO) ---" in text
    assert "stub agent: step 1 of 2 (HELLO)" in text
    assert "(cost $0.0500)" in text
    assert "--- Step 1/2 (HELLO): done (" in text
    tree.cli("node", "status", "pane")


def test_c_c_in_a_pane_shows_pausing_while_a_deaf_agent_is_ended(tree: Tree) -> None:
    """C-c in the pane while the agent ignores SIGTERM: ending its group takes the kill
    grace, and meanwhile the node reads `active (pausing: interrupted: SIGINT)`, not
    plain `active`; once parked it reads `paused (interrupted: SIGINT)`."""
    tree.node("deaf", {"01-WORK.md": "[stub:ignore-term] [stub:hang]"}, "--no-sync")
    tree.cli("node", "start", "deaf", env={**(tree.env or os.environ),
                                            "FRACTAL_KILL_GRACE": "8"})
    _, pgid = wait_until(lambda: _open_step(tree), timeout=20, message="step running")
    pane = tree.node_dir("deaf") / "pane.log"  # the stub prints once it ignores SIGTERM
    wait_until(lambda: "stub agent:" in pane.read_text(errors="replace"), timeout=20,
               message="the agent deaf to SIGTERM")
    (session, socket), = tree.sql("SELECT tmux_session, tmux_socket FROM nodes "
                                  "WHERE node = 'main.deaf'")
    subprocess.run(["tmux", "-S", str(socket), "send-keys", "-t", f"={session}:", "C-c"],
                   check=True)

    def status() -> str:
        return tree.cli("node", "status", "deaf").stdout.strip()

    def pausing() -> str | None:
        shown = status()
        return shown if "pausing" in shown else None

    shown = wait_until(pausing, timeout=10,
                       message="the parking shown while the agent's group is ended")
    assert shown.endswith("active (pausing: interrupted: SIGINT)"), shown
    assert tree.status("deaf") == "active"  # no new status: a detail of `active`
    wait_until(lambda: tree.status("deaf") == "paused", timeout=30, message="parked")
    assert status().endswith("paused (interrupted: SIGINT)")
    wait_until(lambda: not group_alive(pgid), timeout=10, message="agent group ended")
