"""``node kill`` where the pane cannot be reached: the node's processes still die."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from tests.e2e.conftest import Tree
from tests.e2e.test_steering import _group_alive, _wait_running
from tests.helpers import wait_until


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
    assert not _group_alive(int(str(pgid))), "the agent's group outlived the kill"
    wait_until(lambda: not _alive(int(str(supervisor))), 10, message="the loop is gone")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except OSError:
        return False


def test_two_kills_at_once_end_in_one_killed_node_with_nothing_left(tree: Tree) -> None:
    import threading

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
    assert not _group_alive(int(str(pgid)))
