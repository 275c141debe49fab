"""A run keeps the environment it started with: parked by ``tmux kill-server`` and
resumed from a shell without the start shell's variables, its agent still gets them
(and its supervisor the run's own tmux server);
``--refresh-env`` replaces them on purpose and names the variables it changed (never a
value). The kept file is 0600 in a 0700 directory outside the worktree, and no value
of it reaches the database or a commit."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

from tests.e2e.conftest import Tree
from tests.helpers import git, wait_until

SECRET, NEW_SECRET = "s3cret-of-the-start-shell", "s3cret-refreshed"


def _call(cap: Path, n: int) -> dict[str, str]:
    """The environment the agent's ``n``-th launch saw (``[stub:capture]``)."""
    path = cap / f"call-{n}.json"
    wait_until(path.is_file, timeout=30, message=f"launch {n} captured")
    env = json.loads(path.read_text())["env"]
    assert isinstance(env, dict)
    return env


def test_a_resume_restores_the_start_environment_and_refresh_names_changes(
        tree: Tree) -> None:
    cap, go = tree.repo.parent / "cap", tree.repo.parent / "go"
    tree.node("e", {"01-A.md": f"[stub:capture={cap}][stub:wait-file={go}]"},
              "--max-iters", "1", "--no-sync")
    socket = str(tree.repo.parent / "own.sock")
    shell = {k: v for k, v in os.environ.items() if not k.startswith("RUN_")}
    shell["FRACTAL_TMUX_SOCKET"] = socket
    start = {**shell, "RUN_SECRET": SECRET, "RUN_ONLY_AT_START": "1"}
    tree.cli("node", "start", "e", env=start)
    first = _call(cap, 1)
    assert (first["RUN_SECRET"], first["RUN_ONLY_AT_START"]) == (SECRET, "1")

    # the kept file: private, outside the worktree, in no row
    kept = tree.repo / ".fractal" / "main" / "private" / "main.e" / "env.json"
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    assert stat.S_IMODE(kept.parent.stat().st_mode) == 0o700
    assert not kept.resolve().is_relative_to(tree.worktree("e").resolve())
    assert json.loads(kept.read_text())["RUN_SECRET"] == SECRET

    # the host goes away; a resume from another shell (no RUN_* at all) restores them
    subprocess.run(["tmux", "-S", socket, "kill-server"], capture_output=True, check=False)
    wait_until(lambda: tree.status("e") == "paused", timeout=30, message="e parked")
    # (whose tmux server is another: the node goes back to its run's own)
    other = {**shell, "RUN_ONLY_AT_RESUME": "1",
             "FRACTAL_TMUX_SOCKET": str(tree.repo.parent / "other.sock")}
    done = tree.cli("node", "resume", "e", env=other)
    assert "refreshed" not in done.stderr
    second = _call(cap, 2)
    assert (second["RUN_SECRET"], second["RUN_ONLY_AT_START"]) == (SECRET, "1")
    assert "RUN_ONLY_AT_RESUME" not in second
    assert tree.sql("SELECT tmux_socket FROM nodes WHERE node = 'main.e'") == [(socket,)]
    assert not (tree.repo.parent / "other.sock").exists()

    # on purpose: --refresh-env takes this shell's and names what changed
    tree.cli("node", "pause", "e", env=other)
    wait_until(lambda: tree.status("e") == "paused", timeout=30, message="e paused")
    fresh = {**shell, "RUN_SECRET": NEW_SECRET, "RUN_ADDED": "1"}
    done = tree.cli("node", "resume", "e", "--refresh-env", env=fresh)
    assert ("main.e: environment refreshed from this shell: changed RUN_SECRET; added "
            "RUN_ADDED; removed RUN_ONLY_AT_START") in done.stderr
    assert SECRET not in done.stderr and NEW_SECRET not in done.stderr
    third = _call(cap, 3)
    assert (third["RUN_SECRET"], third["RUN_ADDED"]) == (NEW_SECRET, "1")
    assert "RUN_ONLY_AT_START" not in third
    assert json.loads(kept.read_text())["RUN_SECRET"] == NEW_SECRET

    # the tree brake's release: restores by default, refreshes on purpose
    tree.cli("pause", env=other)
    wait_until(lambda: tree.status("e") == "paused", timeout=30, message="e braked")
    done = tree.cli("resume", "--refresh-env", env={**fresh, "RUN_TREE": "1"})
    assert "main.e: environment refreshed from this shell: added RUN_TREE" in done.stderr
    assert _call(cap, 4)["RUN_TREE"] == "1"

    go.touch()
    assert tree.wait_settled("e", timeout=60) == "completed"
    for secret in (SECRET, NEW_SECRET):
        assert secret.encode() not in tree.db.read_bytes()
        assert git(tree.repo, "log", "--all", "-p", "-S", secret, "--format=%H") == ""

    # a continue restores the refreshed one; deleting the node takes its keys away
    tree.cli("node", "start", "e", "--continue", env=shell)
    fifth = _call(cap, 5)
    assert (fifth["RUN_SECRET"], fifth["RUN_TREE"]) == (NEW_SECRET, "1")
    assert tree.wait_settled("e", timeout=60) == "completed"
    tree.cli("node", "delete", "e", "--force")
    assert not kept.parent.exists()


def test_refresh_env_needs_a_relaunch(tree: Tree) -> None:
    tree.node("f", {"01-A.md": "done"}, "--max-iters", "1", "--no-sync")
    done = tree.cli("node", "start", "f", "--refresh-env", check=False)
    assert done.returncode == 2
    assert "--refresh-env only applies with --continue" in done.stderr
    assert tree.status("f") == "idle"


def test_a_resume_from_a_bare_shell_goes_back_to_the_runs_tmux_server(tree: Tree) -> None:
    """The run's tmux server is the one its start environment named: a resume from a shell
    that names none (a bare `env -i` after a reboot) relaunches there, not on the caller's
    default server, where another user's `kill-server` would park the tree again."""
    go = tree.repo.parent / "go"
    tree.node("t", {"01-A.md": f"[stub:wait-file={go}]"}, "--max-iters", "1", "--no-sync")
    socket = str(tree.repo.parent / "run.sock")
    shell = {k: v for k, v in os.environ.items() if k != "FRACTAL_TMUX_SOCKET"}
    tree.cli("node", "start", "t", env={**shell, "FRACTAL_TMUX_SOCKET": socket})
    tree.wait_running("t", "A")
    subprocess.run(["tmux", "-S", socket, "kill-server"], capture_output=True, check=False)
    wait_until(lambda: tree.status("t") == "paused", timeout=30, message="t parked")
    elsewhere = tree.repo.parent / "elsewhere"
    elsewhere.mkdir()
    bare = {"HOME": shell.get("HOME", "/root"), "PATH": shell["PATH"],
            "TMUX_TMPDIR": str(elsewhere)}  # the caller's default server: not the run's
    tree.cli("resume", env=bare)
    assert tree.sql("SELECT tmux_socket FROM nodes WHERE node = 'main.t'") == [(socket,)]
    assert tree.status("t") == "active"
    go.touch()
    assert tree.wait_settled("t", timeout=60) == "completed"
    assert not any(elsewhere.rglob("default"))  # no server was started there
