"""A tree left alone survives losing its host: `tmux kill-server` or a simulated reboot
(every process of the tree SIGKILLed) parks every node of a three-node tree (nothing
committed, a waiting gate still unapproved), and `fractal resume` brings the whole tree
back in the same runs and iterations: the agents' sessions resumed, the gate waiting
again without rerunning its agent. `start --continue --tree` re-arms a settled subtree
in one command."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path

import psutil
import pytest

from tests.e2e.conftest import Tree
from tests.helpers import git, wait_until

pytestmark = pytest.mark.e2e

GATE = "---\nrequires_approval: true\n---\n[stub:write=g.txt:g]"


def _running(tree: Tree, branch: str) -> bool:
    return bool(tree.sql("SELECT 1 FROM steps WHERE node = ? AND ended_at IS NULL AND pgid "
                         "IS NOT NULL AND step_name != 'SYNC'", branch))


def _heads(tree: Tree, names: list[str]) -> dict[str, str]:
    return {n: git(tree.repo, "rev-parse", f"main.{n}") for n in names}


def _counts(tree: Tree, branch: str) -> tuple[object, ...]:
    return tree.sql("SELECT (SELECT COUNT(*) FROM runs WHERE node = ?), "
                    "(SELECT COUNT(*) FROM iterations WHERE node = ?)", branch, branch)[0]


def _three_nodes(tree: Tree, go: Path, env: dict[str, str]) -> dict[str, str]:
    """p and its child p.c each run a step that hangs until ``go`` exists; g waits at a
    gate. Returns the branch heads before the start."""
    work = f"[stub:write=work.txt:half] [stub:hang-unless={go}]"
    tree.node("p", {"01-A.md": work}, "--no-sync", "--max-iters", "1")
    tree.cli("node", "init", "c", "--parent", "p", "--no-sync", "--max-iters", "1")
    cdir = tree.repo / ".worktrees" / "main.p.c" / ".fractal" / "main.p.c"
    for old in (cdir / "steps").iterdir():
        old.unlink()
    (cdir / "steps" / "01-A.md").write_text(work)
    git(tree.repo / ".worktrees" / "main.p.c", "add", "-A")
    git(tree.repo / ".worktrees" / "main.p.c", "commit", "-q", "-m", "steps", "--no-verify")
    tree.node("g", {"01-GATE.md": GATE, "02-B.md": "[stub:write=b.txt:b]"}, "--no-sync",
              "--max-iters", "1")
    heads = _heads(tree, ["p", "p.c", "g"])
    for name in ("p", "p.c", "g"):
        tree.cli("node", "start", name, env=env)
    wait_until(lambda: _running(tree, "main.p") and _running(tree, "main.p.c"), timeout=30,
               message="both agents running")
    wait_until(lambda: "awaiting approval" in tree.cli("node", "status", "g").stdout,
               timeout=30, message="the gate waiting")
    return heads


def _sessions(tree: Tree, branch: str) -> list[object]:
    return [s for (s,) in tree.sql("SELECT session FROM steps WHERE node = ? AND step_name = "
                                   "'A' ORDER BY step_id", branch)]


def _gate_launches(tree: Tree) -> int:
    """How many times the gate's agent ran (a re-entered wait launches nothing)."""
    ((n,),) = tree.sql("SELECT COUNT(*) FROM steps WHERE node = 'main.g' AND step_name = "
                       "'GATE' AND pgid IS NOT NULL")
    return int(str(n))


def _parked_then_resumed(tree: Tree, go: Path, env: dict[str, str], heads: dict[str, str],
                         cause: str) -> None:
    """Every node parked ``paused (interrupted: <cause>...)`` with nothing committed; then
    ``fractal resume`` brings all three back in the same run and iteration: p and p.c
    resume their agent sessions, g waits at its gate again without rerunning its agent."""
    for name in ("p", "p.c", "g"):
        line = tree.cli("node", "status", name).stdout.strip()
        assert line.startswith(f"paused (interrupted: {cause}"), line
    assert _heads(tree, ["p", "p.c", "g"]) == heads  # nothing committed, the gate neither
    assert tree.sql("SELECT COUNT(*) FROM runs WHERE ended_at IS NOT NULL") == [(0,)]
    assert tree.sql("SELECT COUNT(*) FROM steps WHERE status = 'failed'") == [(0,)]
    ((gate_meta,),) = tree.sql("SELECT metadata FROM steps WHERE node = 'main.g' AND "
                               "step_name = 'GATE'")
    assert str(gate_meta).startswith(f"awaiting approval; interrupted: {cause}"), gate_meta

    go.touch()
    tree.cli("resume", env=env)
    assert tree.wait_settled("p", timeout=60) == "completed"
    assert tree.wait_settled("p.c", timeout=60) == "completed"
    wait_until(lambda: "awaiting approval" in tree.cli("node", "status", "g").stdout,
               timeout=30, message="the gate waiting again")
    assert _gate_launches(tree) == 1  # the wait was kept: its agent did not run again
    for branch in ("main.p", "main.p.c", "main.g"):
        assert _counts(tree, branch) == (1, 1)  # the same run, the same iteration
    for branch in ("main.p", "main.p.c"):
        first, again = _sessions(tree, branch)
        assert first and again == first  # the agent session, resumed
    tree.cli("node", "approve", "g")
    assert tree.wait_settled("g", timeout=60) == "completed"
    assert _gate_launches(tree) == 1
    assert git(tree.repo, "show", "main.g:g.txt") == "g"
    assert git(tree.repo, "show", "main.g:b.txt") == "b"
    assert git(tree.repo, "show", "main.p.c:work.txt") == "half"


def test_kill_server_parks_the_tree_and_resume_brings_it_back(tree: Tree) -> None:
    go = tree.repo.parent / "go"
    own = {**os.environ, "FRACTAL_TMUX_SOCKET": str(tree.repo.parent / "own.sock")}
    heads = _three_nodes(tree, go, own)
    (socket,), = tree.sql("SELECT tmux_socket FROM nodes WHERE node = 'main.p'")
    subprocess.run(["tmux", "-S", str(socket), "kill-server"], capture_output=True, check=False)
    for name in ("p", "p.c", "g"):
        wait_until(lambda n=name: tree.status(n) == "paused", timeout=30, message=f"{name} parked")
    _parked_then_resumed(tree, go, own, heads, "SIG")


def test_a_simulated_reboot_is_healed_to_paused_and_resumed(tree: Tree) -> None:
    go = tree.repo.parent / "go"
    own = {**os.environ, "FRACTAL_TMUX_SOCKET": str(tree.repo.parent / "own.sock")}
    heads = _three_nodes(tree, go, own)
    victims: list[psutil.Process] = []
    for (sup,) in tree.sql("SELECT supervisor_pid FROM nodes WHERE supervisor_pid IS NOT NULL"):
        with contextlib.suppress(psutil.NoSuchProcess):
            leader = psutil.Process(int(str(sup)))
            victims += [leader, *leader.children(recursive=True)]
    assert len({p.pid for p in victims}) >= 3
    victims += [p for p in psutil.process_iter(["cmdline"])
                if str(own["FRACTAL_TMUX_SOCKET"]) in " ".join(p.info["cmdline"] or [])]
    for proc in victims:  # every process of the tree at once, the tmux server too
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.send_signal(signal.SIGKILL)
    psutil.wait_procs(victims, timeout=10)
    wait_until(lambda: all(f"main.{n},paused" in tree.cli("node", "list", "--csv").stdout
                           for n in ("p", "p.c", "g")), timeout=30, message="healed to paused")
    _parked_then_resumed(tree, go, own, heads, "supervisor lost")


def test_start_continue_tree_rearms_a_settled_subtree(tree: Tree) -> None:
    tree.node("p", {"01-A.md": "[stub:write=a.txt:a]"}, "--no-sync", "--max-iters", "1")
    tree.cli("node", "init", "c", "--parent", "p", "--no-sync", "--max-iters", "1")
    tree.cli("node", "start", "p")
    tree.cli("node", "start", "p.c")
    assert tree.wait_settled("p") == "completed"
    assert tree.wait_settled("p.c") == "completed"
    refused = tree.cli("node", "start", "p", "--tree", check=False)
    assert refused.returncode != 0 and "--tree only applies with --continue" in refused.stderr
    tree.cli("node", "start", "p", "--continue", "--tree")
    wait_until(lambda: tree.sql("SELECT COUNT(*) FROM runs WHERE ended_at IS NOT NULL")
               == [(4,)], timeout=60, message="both second runs ended")
    assert tree.status("p") == "completed" and tree.status("p.c") == "completed"
    assert _counts(tree, "main.p")[0] == 2 and _counts(tree, "main.p.c")[0] == 2
