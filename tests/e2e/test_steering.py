"""Steering a live tree through the CLI: stop, finish, pause/resume, kill, approval gates,
fan-out, the tree-wide brake, --continue, SYNC and exit notices (issue 4)."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

from fractal.assets import mode_text
from tests.e2e.conftest import Tree
from tests.helpers import git, wait_until

pytestmark = pytest.mark.e2e


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


def _group_alive(pgid: int) -> bool:
    """A live (non-zombie) process is still in group ``pgid``."""
    import os

    import psutil

    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) == pgid and proc.status() != psutil.STATUS_ZOMBIE:
                return True
        except (ProcessLookupError, psutil.Error):
            continue
    return False


def _calls(capture: Path) -> list[dict[str, object]]:
    return [json.loads((capture / f"call-{n}.json").read_text())
            for n in range(1, len(list(capture.glob("call-*.json"))) + 1)]


def test_stop_ends_the_run_after_the_current_step(tree: Tree) -> None:
    release = tree.repo.parent / "release-stop"
    steps = {"01-A.md": f"[stub:write=a.txt:a] [stub:wait-file={release}]",
             "02-B.md": "[stub:write=b.txt:b]"}
    tree.node("stopper", steps, "--no-sync", "--max-iters", "5")
    tree.cli("node", "start", "stopper")
    _wait_running(tree, "stopper", "A")
    tree.cli("node", "stop", "stopper", "--reason", "enough")
    assert tree.status("stopper") == "active"
    status = tree.cli("node", "status", "stopper").stdout
    assert "stopping" in status, (status, tree.sql("SELECT step_name, status, metadata, "
                                                   "started_at, ended_at FROM steps"))
    release.touch()
    assert tree.wait_settled("stopper") == "stopped"
    assert tree.sql("SELECT status, exit_code, metadata FROM runs") == [
        ("stopped", 0, "Stopped by request")]
    assert tree.sql("SELECT step_name, status FROM steps") == [("A", "completed")]
    assert tree.sql("SELECT status FROM iterations") == [("stopped",)]
    assert git(tree.repo, "show", "main.stopper:a.txt") == "a"


def test_finish_ends_the_run_after_the_current_iteration(tree: Tree) -> None:
    release = tree.repo.parent / "release-finish"
    steps = {"01-A.md": f"[stub:wait-file={release}]", "02-B.md": "[stub:write=b.txt:b]"}
    tree.node("finisher", steps, "--no-sync", "--max-iters", "5")
    tree.cli("node", "start", "finisher")
    _wait_running(tree, "finisher", "A")
    tree.cli("node", "finish", "finisher")
    release.touch()
    assert tree.wait_settled("finisher") == "completed"
    assert tree.sql("SELECT status, exit_code, metadata FROM runs") == [
        ("completed", 0, "Finished by request")]
    assert tree.sql("SELECT step_name, status FROM steps ORDER BY step_id") == [
        ("A", "completed"), ("B", "completed")]
    assert tree.sql("SELECT COUNT(*) FROM iterations") == [(1,)]


def test_finish_cancel_withdraws_it(tree: Tree) -> None:
    release = tree.repo.parent / "release-cancel"
    tree.node("undo", {"01-A.md": f"[stub:wait-file={release}]"}, "--no-sync", "--max-iters", "2")
    tree.cli("node", "start", "undo")
    _wait_running(tree, "undo", "A")
    tree.cli("node", "finish", "undo")
    tree.cli("node", "finish", "undo", "--cancel")
    release.touch()
    assert tree.wait_settled("undo") == "completed"
    assert tree.sql("SELECT metadata FROM runs") == [("Reached max iterations (2)",)]


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
    (pgid,), = tree.sql("SELECT pgid FROM steps WHERE step_id = ?", step_id)
    tree.cli("node", "kill", "victim", "--reason", "runaway")
    assert tree.status("victim") == "killed"
    note = "killed by operator: runaway"
    assert tree.sql("SELECT status, metadata FROM runs") == [("killed", note)]
    # The step had a session and reported no cost: it may have spent unrecorded money.
    assert tree.sql("SELECT status, metadata FROM steps") == [("killed", f"{note}; unpriced")]
    assert not _session_alive(tree, "victim")
    assert not _group_alive(int(str(pgid)))
    assert tree.sql("SELECT status, metadata FROM events WHERE event = 'kill'") == [
        ("completed", note)]


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


def _start_at_gate(tree: Tree, name: str) -> None:
    """Start ``name`` (gated step A, then B; up to 3 iterations) and wait at A's gate."""
    steps = {"01-A.md": "---\nrequires_approval: true\n---\nwork",
             "02-B.md": "[stub:write=b.txt:b]"}
    tree.node(name, steps, "--no-sync", "--max-iters", "3")
    tree.cli("node", "start", name)
    wait_until(lambda: json.loads(tree.cli("node", "pending", "--json").stdout),
               timeout=30, message="gate pending")


@pytest.mark.parametrize(("verb", "node_status", "run_reason", "step_reason"), [
    ("stop", "stopped", "Stopped by request", "stopped awaiting approval"),
    ("finish", "completed", "Finished by request", "finish requested awaiting approval"),
])
def test_stop_or_finish_ends_an_approval_wait(tree: Tree, verb: str, node_status: str,
                                              run_reason: str, step_reason: str) -> None:
    """Both end the wait and skip the rest of the iteration; a finish still ends the run
    the way a finish does (completed), a stop the way a stop does."""
    _start_at_gate(tree, "held")
    tree.cli("node", verb, "held")
    assert tree.wait_settled("held") == node_status
    # A finish over a gate nobody approved says so on the run (not on the iteration).
    ended = f"{run_reason}; A never approved" if verb == "finish" else run_reason
    assert tree.sql("SELECT status, exit_code, metadata FROM runs") == [
        (node_status, 0, ended)]
    assert tree.sql("SELECT status, metadata FROM iterations") == [("stopped", run_reason)]
    assert tree.sql("SELECT step_name, status, metadata FROM steps") == [
        ("A", "stopped", step_reason)]


def test_a_finish_taken_by_an_approval_wait_cannot_be_cancelled_half_way(tree: Tree) -> None:
    _start_at_gate(tree, "fin")
    tree.cli("node", "finish", "fin")
    wait_until(lambda: tree.sql("SELECT 1 FROM steps WHERE metadata = "
                                "'finish requested awaiting approval'"), timeout=30)
    tree.cli("node", "finish", "fin", "--cancel", check=False)  # too late either way
    assert tree.wait_settled("fin") == "completed"
    assert tree.sql("SELECT COUNT(*) FROM iterations") == [(1,)]
    assert tree.sql("SELECT metadata FROM runs") == [("Finished by request; A never approved",)]


def test_approval_wait_burns_the_clock(tree: Tree) -> None:
    steps = {"01-A.md": "---\nrequires_approval: true\n---\nwork"}
    tree.node("late", steps, "--no-sync", "--max-iters", "1", "--iter-timeout", "2s")
    tree.cli("node", "start", "late")
    assert tree.wait_settled("late", timeout=30) == "exited"
    (status, code, meta), = tree.sql("SELECT status, exit_code, metadata FROM steps")
    assert (status, code, meta) == ("exited", 124, "timed out awaiting approval")
    assert tree.sql("SELECT metadata FROM iterations")[0][0].startswith("A timed out")


def test_pause_while_awaiting_approval_then_approve_while_parked(tree: Tree) -> None:
    steps = {"01-A.md": "---\nrequires_approval: true\n---\n[stub:write=a.txt:a]",
             "02-B.md": "[stub:write=b.txt:b]"}
    tree.node("pg", steps, "--no-sync", "--max-iters", "1")
    tree.cli("node", "start", "pg")
    wait_until(lambda: json.loads(tree.cli("node", "pending", "--json").stdout), timeout=30)
    tree.cli("node", "pause", "pg")
    assert tree.wait_settled_or("pg", {"paused"}) == "paused"
    assert tree.sql("SELECT status, metadata FROM steps") == [("paused", "awaiting approval")]
    assert json.loads(tree.cli("node", "pending", "--json").stdout)  # still listed
    tree.cli("node", "approve", "pg")
    wait_until(lambda: not _session_alive(tree, "pg"), timeout=10)
    tree.cli("node", "resume", "pg")
    assert tree.wait_settled("pg") == "completed"
    assert tree.sql("SELECT step_name, status FROM steps ORDER BY step_id") == [
        ("A", "paused"), ("B", "completed")]


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


def test_sync_rows_failures_and_timeouts(tree: Tree) -> None:
    steps = {"01-A.md": "[stub:write=a.txt:a]", "02-B.md": "[stub:write=b.txt:b]"}
    tree.node("syncer", steps, "--max-iters", "1",
              node_md="# Task\n\n[stub:sync-fail=4]\n")
    tree.cli("node", "start", "syncer")
    assert tree.wait_settled("syncer") == "completed"
    rows = tree.sql("SELECT step, step_name, status, exit_code FROM steps ORDER BY step_id")
    assert rows == [(1, "SYNC", "failed", 4), (1, "A", "completed", 0),
                    (2, "SYNC", "failed", 4), (2, "B", "completed", 0)]
    tree.node("slowsync", steps, "--max-iters", "1", "--step-timeout", "1s",
              node_md="# Task\n\n[stub:sync-sleep=30]\n")
    tree.cli("node", "start", "slowsync", env={**__import__("os").environ,
                                               "FRACTAL_KILL_GRACE": "1"})
    assert tree.wait_settled("slowsync", timeout=60) == "exited"
    it = tree.sql("SELECT status, metadata FROM iterations WHERE node = 'main.slowsync'")
    assert it == [("failed", "SYNC timed out (1s)")]
    assert tree.sql("SELECT step_name, status, metadata FROM steps WHERE node = "
                    "'main.slowsync' ORDER BY step_id")[1:] == [
        ("A", "stopped", "failed on SYNC"), ("B", "stopped", "failed on SYNC")]


def test_every_exited_run_posts_a_notice(tree: Tree) -> None:
    tree.node("sad", {"01-A.md": "[stub:fail=2]"}, "--no-sync", "--max-iters", "1",
              "--step-retries", "0")
    tree.cli("node", "start", "sad")
    assert tree.wait_settled("sad") == "exited"
    rows = json.loads(tree.cli("radio", "messages", "--node", "sad", "--channel", "outbox",
                               "--json").stdout)
    assert [(r["priority"], r["subject"]) for r in rows] == [
        (7, "run exited: Reached max iterations (1); final iteration failed")]
    reason, spend = rows[0]["data"].splitlines()[:2]
    assert reason == "Reached max iterations (1); final iteration failed"
    assert spend.startswith("run 1 spent ")


def test_killed_tmux_server_is_healed(tree: Tree) -> None:
    import os

    # A server of its own: killing it must not disturb other tests' sessions.
    own = {**os.environ, "FRACTAL_TMUX_SOCKET": str(tree.repo.parent / "own.sock")}
    tree.node("doomed", {"01-A.md": "[stub:hang]"}, "--no-sync")
    tree.cli("node", "start", "doomed", env=own)
    _wait_running(tree, "doomed", "A")
    (socket,), = tree.sql("SELECT tmux_socket FROM nodes WHERE node = 'main.doomed'")
    subprocess.run(["tmux", "-S", str(socket), "kill-server"], capture_output=True, check=False)
    wait_until(lambda: "main.doomed,exited" in tree.cli("node", "list", "--csv").stdout,
               timeout=30, message="healed after kill-server")
    assert tree.sql("SELECT COUNT(*) FROM steps WHERE ended_at IS NULL") == [(0,)]


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
    assert not any(_group_alive(pgid) for pgid in groups)
    kills = tree.sql("SELECT node, metadata FROM events WHERE event = 'kill' ORDER BY event_id")
    assert [node for node, _ in kills] == ["main.up.kid", "main.up"]
    assert kills[1][1] == "killed by operator: lights out"
    assert {s for (s,) in tree.sql("SELECT status FROM runs")} == {"killed"}
    assert {s for (s,) in tree.sql("SELECT status FROM steps")} == {"killed"}
