"""A sandboxed child's hostile agent attacks the files the supervisor writes in its node
dir and the layout the read-only binds were laid on, through the real CLI:

- it swaps ``command.err``, ``setup.log``, ``supervisor.log``, ``pane.log``, ``.session``
  and ``tmp/err`` for symlinks to files outside the sandbox, so the supervisor's next write
  (made outside the sandbox) lands there;
- it renames its node dir away and rebuilds it with a ``config.json`` of its own (the
  read-only binds covered only the old paths), lifting its limits;
- it renames ``refs/heads/feature`` (holding another branch, ``feature/y``) away and
  writes a ``feature/y`` of its own (the pin on the ref file moved with the directory).

On the code before the node dir and ref dirs were pinned each of these succeeded; now
each fails, nothing outside changes, and the agent's own work dirs stay writable."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from tests.helpers import git
from tests.security.conftest import hostile_node, read_report
from tests.trees import Tree

pytestmark = pytest.mark.e2e

SWAPPED = ("command.err", "setup.log", "supervisor.log", "pane.log", ".session", "tmp/err")

ATTACKS = """
import shutil

def swap(name):
    path = os.path.join(FACTS["node"], name)
    target = os.path.join(FACTS["victims"], name.replace("/", "_"))
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.unlink(path)
    os.symlink(target, path)
    return target

def rebuild():
    node = FACTS["node"]
    os.rename(node, node + ".away")
    shutil.copytree(node + ".away", node, symlinks=True)
    with open(os.path.join(node, "config.json"), "w") as fh:
        fh.write('{"max_iters": 1000, "max_cost": 1000000}')
    return "rebuilt"

def ref_dir():
    heads = FACTS["heads"]
    os.rename(os.path.join(heads, "feature"), os.path.join(heads, "feature.away"))
    os.makedirs(os.path.join(heads, "feature"))
    with open(os.path.join(heads, "feature", "y"), "w") as fh:
        fh.write(FACTS["forged"] + "\\n")
    return "moved"

def own_work():
    for name in ("plans", "memory", "tmp"):
        with open(os.path.join(FACTS["node"], name, "agent-note.md"), "w") as fh:
            fh.write("mine\\n")
    return "written"

for name in FACTS["swapped"]:
    attempt("swap:" + name, lambda name=name: swap(name))
attempt("rebuild", rebuild)
attempt("ref_dir", ref_dir)
attempt("own_work", own_work)
"""


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else "absent"


def test_the_supervisors_files_and_the_node_dir_cannot_be_swapped_or_moved(
        sandboxed_tree: Tree, tmp_path: Path) -> None:
    tree = sandboxed_tree
    victims = tmp_path / "victims"
    victims.mkdir()
    git(tree.repo, "branch", "feature/y", "main")
    feature_tip = git(tree.repo, "rev-parse", "feature/y")
    node = tree.node_dir("a.b")
    facts = {"node": str(node), "victims": str(victims), "swapped": list(SWAPPED),
             "heads": str(tree.repo / ".git" / "refs" / "heads"),
             "forged": git(tree.repo, "commit-tree", "main^{tree}", "-m", "forged")}
    report_path = hostile_node(tree, tmp_path, ATTACKS, facts)
    config_before = _digest(node / "config.json")
    tree.cli("node", "start", "a.b")
    assert tree.wait_settled("a.b", timeout=300) == "completed"
    report = read_report(report_path)
    for name in SWAPPED:
        assert report["swap:" + name]["ok"] is False, (name, report["swap:" + name])
    assert report["rebuild"]["ok"] is False, report["rebuild"]
    assert report["ref_dir"]["ok"] is False, report["ref_dir"]
    assert report["own_work"]["ok"] is True, report["own_work"]
    # nothing was written through a symlink, the node dir is the one its parent made
    assert sorted(p.name for p in victims.iterdir()) == []
    assert not any(node.joinpath(name).is_symlink() for name in SWAPPED)
    assert not node.with_name("main.a.b.away").exists()
    assert _digest(node / "config.json") == config_before
    assert (node / "tmp" / "agent-note.md").read_text() == "mine\n"
    # the other branch under refs/heads/feature is where it was
    assert git(tree.repo, "rev-parse", "feature/y") == feature_tip
    assert not (tree.repo / ".git" / "refs" / "heads" / "feature.away").exists()
    assert tree.sql("SELECT max_cost FROM nodes WHERE node = 'main.a.b'") == [(1.0,)]
    assert tree.sql("SELECT COUNT(*) FROM iterations WHERE node = 'main.a.b'") == [(1,)]
