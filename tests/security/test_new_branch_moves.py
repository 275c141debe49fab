"""A branch made while another node's agent runs cannot be moved by that agent (issue
29). Its ref file did not exist when the launch started, so no read-only bind pins it;
on the code before, a node ``node init`` made during a sibling's launch could be pointed
anywhere by the sibling's agent (at a commit of the agent's own, to be merged later under
the new node's name), and the check after the launch left it, a node owning it. Now the
branch is set back, after the launch, to where its own worktree's ``HEAD`` reflog last
left it (which no other sandbox can write), as a ``ref_restored`` event."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import git, wait_until
from tests.security.conftest import hostile_node, read_report
from tests.trees import Tree

pytestmark = pytest.mark.e2e

ATTACKS = """
with open(FACTS["ready"], "w") as fh:
    fh.write("ready\\n")
deadline = time.time() + 120
while not os.path.exists(FACTS["go"]) and time.time() < deadline:
    time.sleep(0.05)
def move():
    with open(os.path.join(FACTS["heads"], "main.a.d"), "w") as fh:
        fh.write(FACTS["evil"] + "\\n")
    return "moved"
attempt("move_new", move)
"""


def test_a_branch_made_during_a_launch_is_set_back_after_it(
        sandboxed_tree: Tree, tmp_path: Path) -> None:
    tree = sandboxed_tree
    heads = tree.repo / ".git" / "refs" / "heads"
    tmp = tree.node_dir("a.b") / "tmp"
    ready, go = tmp / "ready", tmp / "go"
    evil = git(tree.repo, "rev-parse", "main")
    report_path = hostile_node(tree, tmp_path, ATTACKS, {
        "heads": str(heads), "ready": str(ready), "go": str(go), "evil": evil})
    tree.cli("node", "start", "a.b")
    wait_until(ready.exists, timeout=120, message="the agent's launch never began")
    tree.cli("node", "init", "d", "--parent", "a", "--max-cost", "1")  # during a.b's launch
    tip = git(tree.repo, "rev-parse", "main.a.d")
    assert tip != evil
    go.write_text("go\n")
    assert tree.wait_settled("a.b", timeout=300) == "completed"
    assert read_report(report_path)["move_new"]["ok"] is True  # written, then set back
    assert git(tree.repo, "rev-parse", "main.a.d") == tip
    restored = [str(m) for (m,) in tree.sql(
        "SELECT metadata FROM events WHERE node = 'main.a.b' AND event = 'ref_restored'")]
    assert any(m.startswith("refs/heads/main.a.d:") for m in restored), restored
