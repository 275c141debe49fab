"""A command typed into a new window of a node's tmux session (``tmux new-window`` on
fractal's server, as an agent that reached the socket did) runs below no supervisor, yet
is no operator's shell: its event rows say ``tmux``. The same command from the operator's
own shell still says ``operator``. On the code before, both said ``operator``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import wait_until
from tests.trees import Tree

pytestmark = pytest.mark.e2e


def _pause_actors(tree: Tree) -> list[object]:
    return [a for (a,) in tree.sql("SELECT actor FROM events WHERE node = 'main.x' AND "
                                   "event = 'pause' AND metadata = 'from-tmux'")]


def test_a_command_from_a_window_of_a_nodes_session_is_recorded_as_tmux(
        tree: Tree, tmp_path: Path) -> None:
    release = tmp_path / "release"
    tree.node("x", {"01-A.md": f"[stub:wait-file={release}]"}, "--no-sync", "--max-iters", "1")
    tree.cli("node", "start", "x")
    tree.wait_running("x")
    ((session,),) = tree.sql("SELECT tmux_session FROM nodes WHERE node = 'main.x'")
    command = f"{sys.executable} -m fractal node pause x --reason from-tmux"
    subprocess.run(["tmux", "-S", str(tree.socket), "new-window", "-d", "-t", f"={session}",
                    "-c", str(tree.repo), command], check=True, capture_output=True)
    assert wait_until(lambda: _pause_actors(tree), timeout=60,
                      message="the pause typed in the node's session") == ["tmux"]
    assert tree.wait_status("x", {"paused"}) == "paused"  # it was obeyed, recorded as tmux


def test_the_operators_own_shell_is_still_the_operator(tree: Tree) -> None:
    tree.node("x", {"01-A.md": "done"}, "--no-sync", "--max-iters", "1")
    tree.cli("node", "retire", "x")
    assert [a for (a,) in tree.sql("SELECT actor FROM events WHERE node = 'main.x' AND "
                                   "event = 'retire'")] == ["operator"]
