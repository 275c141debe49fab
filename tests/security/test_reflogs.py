"""A sandboxed agent cannot rewrite another branch's reflog (issue 29). On the code
before, ``.git/logs`` was writable from every sandbox, so an agent could forge the
history ``git reflog`` shows for its parent's branch (the place ``fractal doctor`` sends
you to set a broken branch back) or the main checkout's ``HEAD``. Its own branch's
reflog it still writes, and it still makes new branches (git inside is told to make no
new reflog, which the read-only ``logs/refs/heads`` could not hold)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import git
from tests.security.conftest import hostile_node, read_report
from tests.trees import Tree

pytestmark = pytest.mark.e2e

ATTACKS = """
logs = FACTS["logs"]
FORGED = "0" * 40 + " " + "1" * 40 + " Mallory <m@x> 1700000000 +0000\\tforged\\n"
def forge(name):
    with open(os.path.join(logs, name), "a") as fh:
        fh.write(FORGED)
    return name
def replace(name):
    path = os.path.join(logs, name)
    with open(path + ".new", "w") as fh:
        fh.write(FORGED)
    os.rename(path + ".new", path)
    return name
for name in ("refs/heads/main", "refs/heads/main.a", "refs/heads/main.a.c", "HEAD"):
    attempt("append " + name, lambda name=name: forge(name))
    attempt("replace " + name, lambda name=name: replace(name))
attempt("own", lambda: subprocess.run(
    ["git", "commit", "-q", "--allow-empty", "-m", "own work"], check=True))
attempt("new branch", lambda: subprocess.run(["git", "branch", "agents-own"], check=True))
"""

OTHERS = ("refs/heads/main", "refs/heads/main.a", "refs/heads/main.a.c", "HEAD")


def test_a_sandboxed_agent_cannot_forge_another_branchs_reflog(
        sandboxed_tree: Tree, tmp_path: Path) -> None:
    tree = sandboxed_tree
    logs = tree.repo / ".git" / "logs"
    report_path = hostile_node(tree, tmp_path, ATTACKS, {"logs": str(logs)})
    before = {name: (logs / name).read_bytes() for name in OTHERS}
    tree.cli("node", "start", "a.b")
    assert tree.wait_settled("a.b", timeout=300) == "completed"
    report = read_report(report_path)
    for name in OTHERS:
        assert report[f"append {name}"]["ok"] is False, report[f"append {name}"]
        assert report[f"replace {name}"]["ok"] is False, report[f"replace {name}"]
        assert (logs / name).read_bytes() == before[name], name
        assert "forged" not in git(tree.repo, "reflog", "show", "--format=%gs",
                                   name.removeprefix("refs/heads/"))
    assert report["own"]["ok"] is True, report["own"]  # its own reflog takes the commit
    assert "own work" in git(tree.repo, "reflog", "show", "--format=%gs", "main.a.b")
    assert report["new branch"]["ok"] is True, report["new branch"]  # made, without a reflog
    assert git(tree.repo, "rev-parse", "agents-own") == git(tree.repo, "rev-parse", "main.a.b")
