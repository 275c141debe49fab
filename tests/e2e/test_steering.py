"""Steering a live tree through the CLI: pause/resume, kill (also with no tmux on PATH, and
two at once), an approval gate, fan-out, the tree-wide brake and --continue. Stop, finish, SYNC and the approval waits' other ends
are tested in-process (tests/unit/test_loop_steering.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

from fractal.assets import mode_text
from tests.e2e.conftest import Tree
from tests.helpers import git, group_alive, pid_alive, wait_until

# On both backends: the CLI, supervisors and agents of a tree against one ledger.
pytestmark = [pytest.mark.e2e, pytest.mark.backend]


def _running_step(tree: Tree, node: str, name: str) -> int | None:
    rows = tree.sql("SELECT step_id FROM steps WHERE node = ? AND step_name = ? "
                    "AND ended_at IS NULL AND pgid IS NOT NULL", f"main.{node}", name)
    return int(rows[0][0]) if rows else None


def _wait_running(tree: Tree, node: str, name: str) -> int:
    return int(wait_until(lambda: _running_step(tree, node, name), timeout=30,
                          message=f"{node} step {name} running"))


def _session_alive(tree: Tree, node: str) -> bool:
    (session, socket), = tree.sql("SELECT tmux_session, tmux_socket FROM nodes WHERE node = ?",
                                  f"main.{node}")
    out = subprocess.run(["tmux", "-S", str(socket), "has-session", "-t", f"={session}"],
                         capture_output=True, check=False)
    return out.returncode == 0


def _calls(capture: Path) -> list[dict[str, object]]:
    return [json.loads((capture / f"call-{n}.json").read_text())
            for n in range(1, len(list(capture.glob("call-*.json"))) + 1)]


def test_pause_parks_and_resume_adopts_the_run(tree: Tree) -> None:
    capture = tree.repo.parent / "cap-pause"
    go = tree.repo.parent / "go-on"
    steps = {"01-A.md": f"[stub:capture={capture}] [stub:write=wip.txt:draft] "
                        f"[stub:hang-unless={go}]",
             "02-B.md": f"[stub:capture={capture}]"}
    tree.node("parker", steps, "--no-sync", "--max-iters", "1", "--timeout", "10m")
    tree.cli("node", "start", "parker")
    _wait_running(tree, "parker", "A")
    wait_until(lambda: (tree.worktree("parker") / "wip.txt").exists(), timeout=10)
    head = git(tree.repo, "rev-parse", "main.parker")
    sent = time.monotonic()
    tree.cli("node", "pause", "parker")
    wait_until(lambda: tree.sql("SELECT status FROM steps WHERE step_name = 'A'") ==
               [("paused",)], timeout=10, message="step A paused")
    assert time.monotonic() - sent < 5
    assert tree.wait_settled_or("parker", {"paused"}) == "paused"
    wait_until(lambda: not _session_alive(tree, "parker"), timeout=10, message="pane exits")
    assert tree.sql("SELECT COUNT(*) FROM runs WHERE ended_at IS NULL") == [(1,)]
    assert tree.sql("SELECT COUNT(*) FROM iterations WHERE ended_at IS NULL") == [(1,)]
    assert git(tree.repo, "rev-parse", "main.parker") == head  # nothing committed
    assert (tree.worktree("parker") / "wip.txt").read_text() == "draft\n"
    assert tree.cli("node", "status", "parker").stdout.startswith("paused")
    time.sleep(2)  # a parked span to be credited back (a measured interval, not a sync)
    go.touch()
    tree.cli("node", "resume", "parker")
    assert tree.wait_settled("parker") == "completed"
    runs = tree.sql("SELECT run_id, status, metadata FROM runs")
    assert [r[1:] for r in runs] == [("completed", "Reached max iterations (1)")]
    assert tree.sql("SELECT iter FROM iterations") == [(1,)]
    assert [r for r in tree.sql("SELECT step_name, status FROM steps ORDER BY step_id")] == [
        ("A", "paused"), ("A", "completed"), ("B", "completed")]
    first, second, _third = _calls(capture)
    resume_text = mode_text("RESUME").strip().splitlines()[0]
    assert resume_text not in str(first["prompt"]) and resume_text in str(second["prompt"])
    env1, env2 = first["env"], second["env"]
    assert isinstance(env1, dict) and isinstance(env2, dict)
    (paused_session,), = tree.sql("SELECT session FROM steps WHERE status = 'paused'")
    assert env1["FRACTAL_SESSION_ID"] == ""  # the first launch opened the session
    assert env2["FRACTAL_SESSION_ID"] == paused_session != ""  # the resume continues it
    assert env2["RUN_ID"] == env1["RUN_ID"]
    credit = int(env2["RUN_END_EPOCH"]) - int(env1["RUN_END_EPOCH"])
    assert credit >= 2, "the parked span is credited back to the run wall"
    assert git(tree.repo, "show", "main.parker:wip.txt") == "draft"


def test_kill_reaps_the_loop_the_agent_and_the_pane(tree: Tree) -> None:
    tree.node("victim", {"01-A.md": "[stub:ignore-term] [stub:hang]"}, "--no-sync")
    tree.cli("node", "start", "victim")
    step_id = _wait_running(tree, "victim", "A")
    # The session id arrives on the agent's stream a moment after the launch is booked.
    wait_until(lambda: tree.sql("SELECT session FROM steps WHERE step_id = ?", step_id)
               != [(None,)], timeout=30, message="step A's session recorded")
    (pgid,), = tree.sql("SELECT pgid FROM steps WHERE step_id = ?", step_id)
    tree.cli("node", "kill", "victim", "--reason", "runaway")
    assert tree.status("victim") == "killed"
    note = "killed by operator: runaway"
    assert tree.sql("SELECT status, metadata FROM runs") == [("killed", note)]
    # The step had a session and reported no cost: it may have spent unrecorded money.
    assert tree.sql("SELECT status, metadata FROM steps") == [("killed", f"{note}; unpriced")]
    assert not _session_alive(tree, "victim")
    assert not group_alive(int(str(pgid)))
    assert tree.sql("SELECT status, metadata FROM events WHERE event = 'kill'") == [
        ("completed", note)]


def test_kill_without_tmux_on_path_still_stops_the_loop_and_the_agent(
        tree: Tree, tmp_path: Path) -> None:
    tree.node("victim", {"01-A.md": "[stub:ignore-term] [stub:hang]"}, "--no-sync")
    tree.cli("node", "start", "victim")
    step_id = _wait_running(tree, "victim", "A")
    (pgid,), = tree.sql("SELECT pgid FROM steps WHERE step_id = ?", step_id)
    (supervisor,), = tree.sql("SELECT supervisor_pid FROM nodes WHERE node = ?", "main.victim")
    bare = tmp_path / "no-tmux-bin"
    bare.mkdir()
    git_binary = shutil.which("git")
    assert git_binary is not None
    (bare / "git").symlink_to(git_binary)
    env = {**(tree.env or os.environ), "PATH": str(bare)}
    proc = tree.cli("node", "kill", "victim", check=False, env=env)
    assert proc.returncode == 1 and "tmux" in proc.stderr, proc.stderr
    assert tree.status("victim") == "killed"
    assert not group_alive(int(str(pgid))), "the agent's group outlived the kill"
    wait_until(lambda: not pid_alive(int(str(supervisor))), 10, message="the loop is gone")


def test_two_kills_at_once_end_in_one_killed_node_with_nothing_left(tree: Tree) -> None:
    tree.node("twice", {"01-A.md": "[stub:ignore-term] [stub:hang]"}, "--no-sync")
    tree.cli("node", "start", "twice")
    step_id = _wait_running(tree, "twice", "A")
    (pgid,), = tree.sql("SELECT pgid FROM steps WHERE step_id = ?", step_id)
    codes: list[int] = []
    kills = [threading.Thread(target=lambda: codes.append(
        tree.cli("node", "kill", "twice", check=False).returncode)) for _ in range(2)]
    for kill in kills:
        kill.start()
    for kill in kills:
        kill.join()
    assert sorted(codes) in ([0, 0], [0, 1]), codes
    assert tree.status("twice") == "killed"
    assert tree.sql("SELECT status FROM steps") == [("killed",)]
    assert tree.sql("SELECT count(*) FROM events WHERE event = 'kill' "
                    "AND status = 'completed'") == [(1,)]  # a second is a refusal
    assert not group_alive(int(str(pgid)))


def test_approval_gate_waits_for_the_parent(tree: Tree) -> None:
    steps = {"01-A.md": "---\nrequires_approval: true\n---\n[stub:write=a.txt:a]",
             "02-B.md": "[stub:write=b.txt:b]"}
    tree.node("gated", steps, "--no-sync", "--max-iters", "1")
    tree.node("other", {"01-A.md": "x"})
    tree.cli("node", "start", "gated")
    rows = wait_until(lambda: json.loads(tree.cli("node", "pending", "--json").stdout),
                      timeout=30, message="gate pending")
    assert [(r["branch"], r["step_name"]) for r in rows] == [("main.gated", "A")]
    assert "A awaiting approval" in tree.cli("node", "status", "gated").stdout
    refused = tree.cli("node", "approve", "gated", cwd=tree.worktree("other"), check=False)
    assert refused.returncode == 1 and "only main" in refused.stderr
    tree.cli("node", "approve", "gated")
    assert tree.wait_settled("gated") == "completed"
    (status, approved), = tree.sql("SELECT status, approved FROM steps WHERE step_name = 'A'")
    assert status == "completed" and approved
    assert tree.sql("SELECT status FROM steps WHERE step_name = 'B'") == [("completed",)]
    again = tree.cli("node", "approve", "gated", check=False)
    assert again.returncode == 1


def test_an_approval_reaches_the_gate_through_the_ledger_when_the_wake_file_cannot(
        tree: Tree) -> None:
    """On PostgreSQL the verb also notifies the tree's wake channel: with the node's
    ``.wake`` out of the verb's reach (a directory now, as if on another host), the gate's
    idle wait (its database poll: 5 s) still ends within a second of the approval."""
    if not (tree.env if tree.env is not None else os.environ).get("FRACTAL_DATABASE_URL"):
        pytest.skip("the wake channel is a PostgreSQL ledger's (run with --backend=both)")
    steps = {"01-A.md": "---\nrequires_approval: true\n---\n[stub:write=a.txt:a]"}
    tree.node("gated", steps, "--no-sync", "--max-iters", "1")
    tree.cli("node", "start", "gated")
    wait_until(lambda: tree.sql("SELECT step_id FROM steps WHERE step_name = 'A' AND "
                                "metadata = 'awaiting approval' AND ended_at IS NULL"),
               timeout=30, message="gate pending")
    wake = tree.node_dir("gated") / ".wake"
    wake.unlink(missing_ok=True)
    wake.mkdir()
    started = time.monotonic()
    tree.cli("node", "approve", "gated")
    wait_until(lambda: tree.sql("SELECT 1 FROM steps WHERE step_name = 'A' AND "
                                "status = 'completed'"), timeout=30, interval=0.01,
               message="the gate released")
    assert time.monotonic() - started < 1.0
    assert tree.wait_settled("gated") == "completed"


def test_fan_out_orders_and_a_child_under_a_paused_parent(tree: Tree) -> None:
    release = tree.repo.parent / "release-fan"
    step = {"01-A.md": f"[stub:wait-file={release}]"}
    tree.node("p", step, "--no-sync")
    tree.cli("node", "init", "c", "--parent", "p", "--no-sync")
    cdir = tree.repo / ".worktrees" / "main.p.c" / ".fractal" / "main.p.c"
    (cdir / "steps").joinpath("00-PREPARE.md").write_text(f"[stub:wait-file={release}]")
    tree.cli("node", "start", "p")
    tree.cli("node", "start", "p.c")
    _wait_running(tree, "p", "A")
    tree.cli("node", "stop", "p")
    order = [r[0] for r in tree.sql("SELECT node FROM signals WHERE signal = 'stop' "
                                    "ORDER BY signal_id")]
    assert order == ["main.p.c", "main.p"]
    release.touch()
    assert tree.wait_settled("p") == "stopped"
    wait_until(lambda: tree.status("p.c") == "stopped", timeout=30)


def test_pause_fans_out_parent_first_and_blocks_children(tree: Tree) -> None:
    go = tree.repo.parent / "go-fan"
    step = {"01-A.md": f"[stub:hang-unless={go}]"}
    tree.node("pp", step, "--no-sync", "--max-iters", "1")
    tree.cli("node", "init", "kid", "--parent", "pp", "--no-sync", "--max-iters", "1")
    tree.cli("node", "init", "late", "--parent", "pp", "--no-sync")
    tree.cli("node", "start", "pp")
    tree.cli("node", "start", "pp.kid")
    _wait_running(tree, "pp", "A")
    tree.cli("node", "pause", "pp")
    order = [r[0] for r in tree.sql("SELECT node FROM signals WHERE signal = 'pause' "
                                    "ORDER BY signal_id")]
    assert order[0] == "main.pp"
    wait_until(lambda: tree.status("pp") == "paused", timeout=15)
    refused = tree.cli("node", "start", "pp.late", check=False)
    assert refused.returncode == 1 and "paused" in refused.stderr
    go.touch()
    wait_until(lambda: tree.status("pp.kid") in ("paused", "completed"), timeout=30)
    tree.cli("node", "resume", "pp")
    assert tree.wait_settled("pp") == "completed"


def test_tree_brake_blocks_starts_until_resume(tree: Tree) -> None:
    go = tree.repo.parent / "go-brake"
    tree.node("busy", {"01-A.md": f"[stub:hang-unless={go}]"}, "--no-sync", "--max-iters", "1")
    tree.node("idle", {"01-A.md": "x"}, "--no-sync", "--max-iters", "1")
    tree.cli("node", "start", "busy")
    _wait_running(tree, "busy", "A")
    tree.cli("pause")
    wait_until(lambda: tree.status("busy") == "paused", timeout=15)
    refused = tree.cli("node", "start", "idle", check=False)
    assert refused.returncode == 1 and "fractal resume" in refused.stderr
    refused = tree.cli("node", "init", "newbie", check=False)
    assert refused.returncode == 1 and "paused" in refused.stderr
    for again in ((), ("--continue",)):  # the paused node itself: resumed, not started
        refused = tree.cli("node", "start", "busy", *again, check=False)
        assert refused.returncode == 1
        assert ("node main.busy is paused, so it is resumed, not started: the tree main is "
                "paused; `fractal resume` lifts the brake and resumes its run") in refused.stderr
    go.touch()
    wait_until(lambda: not _session_alive(tree, "busy"), timeout=10)
    tree.cli("resume")
    assert tree.wait_settled("busy") == "completed"
    tree.cli("node", "start", "idle")
    assert tree.wait_settled("idle") == "completed"


def test_continue_commits_node_edits_and_refuses_project_dirt(tree: Tree) -> None:
    capture = tree.repo.parent / "cap-continue"
    ndir = tree.node("again", {"01-A.md": f"[stub:capture={capture}]"}, "--no-sync",
                     "--max-iters", "1")
    tree.cli("node", "start", "again")
    assert tree.wait_settled("again") == "completed"
    (ndir / "NODE.md").write_text("# Task\n\nA sharper task.\n")
    (tree.worktree("again") / "stray.txt").write_text("operator scratch\n")
    # the status settles before the pane exits: a start meeting the pane is refused
    wait_until(lambda: not _session_alive(tree, "again"), timeout=30, message="pane gone")
    refused = tree.cli("node", "start", "again", "--continue", check=False)
    assert refused.returncode == 1 and "stray.txt" in refused.stderr
    tree.cli("node", "start", "again", "--continue", "--clean")
    assert tree.wait_settled("again") == "completed"
    assert not (tree.worktree("again") / "stray.txt").exists()
    subjects = git(tree.repo, "log", "--format=%s", "main.again")
    assert "main.again: operator edits (committed at continue)" in subjects
    last = _calls(capture)[-1]
    assert "A sharper task." in str(last["prompt"])
    assert mode_text("CONTINUE").strip().splitlines()[0] in str(last["prompt"])


def test_killed_tmux_server_is_healed(tree: Tree) -> None:
    # A server of its own: killing it must not disturb other tests' sessions.
    own = {**os.environ, "FRACTAL_TMUX_SOCKET": str(tree.repo.parent / "own.sock")}
    tree.node("doomed", {"01-A.md": "[stub:hang]"}, "--no-sync")
    tree.cli("node", "start", "doomed", env=own)
    _wait_running(tree, "doomed", "A")
    (socket,), = tree.sql("SELECT tmux_socket FROM nodes WHERE node = 'main.doomed'")
    subprocess.run(["tmux", "-S", str(socket), "kill-server"], capture_output=True, check=False)
    wait_until(lambda: "main.doomed,paused" in tree.cli("node", "list", "--csv").stdout,
               timeout=30, message="parked after kill-server")
    assert tree.sql("SELECT COUNT(*) FROM steps WHERE ended_at IS NULL") == [(0,)]
    assert tree.sql("SELECT status, ended_at FROM runs WHERE node = 'main.doomed'") == [
        ("active", None)]


def test_spawn_caps_hold_under_concurrency(tree: Tree) -> None:
    tree.cli("node", "init", "boss", "--max-children", "2", "--max-depth", "1")
    codes: list[int] = []

    def spawn(n: int) -> None:
        out = tree.cli("node", "init", f"w{n}", "--parent", "boss", check=False)
        codes.append(out.returncode)

    threads = [threading.Thread(target=spawn, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(codes) == [0, 0, 1, 1]
    children = [r[0] for r in tree.sql("SELECT node FROM nodes WHERE parent = 'main.boss'")]
    assert len(children) == 2
    deep = tree.cli("node", "init", "deep", "--parent", str(children[0]), check=False)
    assert deep.returncode == 1 and "max_depth" in deep.stderr


def test_killing_a_parent_reaps_its_subtree_in_one_sweep(tree: Tree) -> None:
    """A parent and its child, both running agents that ignore SIGTERM: one kill of the
    parent records the child's kill first, then stops both nodes' groups together."""
    hang = "[stub:ignore-term] [stub:hang]"
    tree.node("up", {"01-A.md": hang}, "--no-sync")
    tree.cli("node", "init", "kid", "--parent", "up", "--no-sync")
    kid_dir = tree.repo / ".worktrees" / "main.up.kid" / ".fractal" / "main.up.kid"
    shutil.rmtree(kid_dir / "steps")
    (kid_dir / "steps").mkdir()
    (kid_dir / "steps" / "01-A.md").write_text(hang)
    groups = []
    for name in ("up", "up.kid"):
        tree.cli("node", "start", name)
        step_id = _wait_running(tree, name, "A")
        (pgid,), = tree.sql("SELECT pgid FROM steps WHERE step_id = ?", step_id)
        groups.append(int(str(pgid)))
    tree.cli("node", "kill", "up", "--reason", "lights out")
    assert [tree.status(n) for n in ("up", "up.kid")] == ["killed", "killed"]
    assert not any(_session_alive(tree, n) for n in ("up", "up.kid"))
    assert not any(group_alive(pgid) for pgid in groups)
    kills = tree.sql("SELECT node, metadata FROM events WHERE event = 'kill' ORDER BY event_id")
    assert [node for node, _ in kills] == ["main.up.kid", "main.up"]
    assert kills[1][1] == "killed by operator: lights out"
    assert {s for (s,) in tree.sql("SELECT status FROM runs")} == {"killed"}
    assert {s for (s,) in tree.sql("SELECT status FROM steps")} == {"killed"}
