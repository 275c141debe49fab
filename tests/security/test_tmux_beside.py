"""A tree whose tmux socket lies beside the project (``FRACTAL_TMUX_SOCKET`` in a directory
that also holds the repository and the agent), through the real CLI: the sandbox hides
the socket and nothing else. Before, it hid the socket's whole directory: an agent
program there failed "No such file or directory" (until the program alone was bound
back), and whatever it keeps beside it still could not be read. Now the agent reads it,
commits, and still cannot reach fractal's tmux server."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.helpers import git
from tests.security.conftest import hostile_node, read_report
from tests.trees import Tree

pytestmark = pytest.mark.e2e

ATTACKS = """
def tmux():
    return subprocess.run(["tmux", "-S", FACTS["tmux"], "new-window", "-d",
                           "touch " + FACTS["marker"]], check=True, capture_output=True,
                          text=True).stdout

def own_commit():
    with open("work.txt", "w") as fh:
        fh.write("the agent's own work\\n")
    subprocess.run(["git", "add", "work.txt"], check=True, capture_output=True)
    subprocess.run(["git", "-c", "user.name=agent", "-c", "user.email=agent@example.com",
                    "commit", "-q", "--no-verify", "-m", "agent: own work"], check=True,
                   capture_output=True)
    return "committed"

def beside():
    with open(FACTS["beside"]) as fh:
        return fh.read()

attempt("beside", beside)
attempt("tmux", tmux)
attempt("own_commit", own_commit)
"""


def test_a_socket_beside_the_project_is_hidden_alone(sandboxed_tree: Tree,
                                                     tmp_path: Path) -> None:
    tree = sandboxed_tree
    socket = tmp_path / "t.sock"  # tmp_path also holds the repository and the agent
    tree.env = {**os.environ, "FRACTAL_TMUX_SOCKET": str(socket)}
    marker = tmp_path / "tmux-owned"
    lib = tmp_path / "agent-lib.txt"  # what an agent keeps beside its program
    lib.write_text("helper\n")
    report_path = hostile_node(tree, tmp_path, ATTACKS,
                               {"tmux": str(socket), "marker": str(marker), "beside": str(lib)})
    tree.cli("node", "start", "a.b")
    assert tree.wait_settled("a.b", timeout=300) == "completed"
    assert tree.sql("SELECT tmux_socket FROM nodes WHERE node = 'main.a.b'") == [(str(socket),)]
    report = read_report(report_path)
    assert report["beside"] == {"ok": True, "detail": "helper\n"}, report["beside"]
    assert report["tmux"]["ok"] is False, report["tmux"]
    assert report["own_commit"]["ok"] is True, report["own_commit"]
    assert "agent: own work" in git(tree.repo, "log", "--format=%s", "main.a.b")
    assert not marker.exists()
