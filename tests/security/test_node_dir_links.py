"""A sandboxed agent commits ``.fractal/<child>`` as a symbolic link on its own branch
(through the index, since ``.fractal/`` is read-only inside) and then spawns that child
through the real CLI, so the new worktree checks the link out where the child's node dir
belongs. Four targets, as the review tried them: any directory, a sibling's node dir, the
agent's own node dir and the tree's data dir. On the code before the fix every seed write
(NODE.md, steps, scripts, config.json) went through the link, outside any sandbox: the
sibling's and the node's own limits were replaced, and the root config was overwritten so
every command of the tree failed. Now the fork's link is dropped before anything is
written, each child gets a real node dir of its own, and nothing at the targets changes.

The agent also stages a link with ``update-index`` and asks ``fractal commit`` to commit
it: the commit drops every link entry under ``.fractal/``, so its branch holds none."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from tests.helpers import git
from tests.security.conftest import hostile_node, read_report
from tests.trees import Tree

pytestmark = pytest.mark.e2e

TARGETS = ("outside", "sibling", "own", "data")

ATTACKS = """
def run(*args, stdin=None):
    done = subprocess.run(list(args), capture_output=True, text=True, timeout=120,
                          input=stdin)
    if done.returncode != 0:
        raise RuntimeError(f"{args[:3]} exit {done.returncode}: {done.stderr.strip()}")
    return done.stdout.strip()

def fractal(*args):
    return run(sys.executable, "-m", "fractal", *args)

def stage_link(name, target):
    blob = run("git", "hash-object", "-w", "--stdin", stdin=target)
    run("git", "update-index", "--add", "--cacheinfo",
        f"120000,{blob},.fractal/main.a.b.{name}")

def plant_and_spawn(name, target):
    stage_link(name, target)
    run("git", "commit", "-q", "--no-verify", "-m", f"plant {name}")
    return fractal("node", "init", name, "--max-cost", "0.01", "--max-iters", "99",
                   "--agent", FACTS["other_agent"], "--task", "INJECTED " + name)

for name, target in FACTS["targets"].items():
    attempt(name, lambda: plant_and_spawn(name, target))

def commit_link():
    stage_link("t5", FACTS["targets"]["outside"])
    with open("work.txt", "w") as fh:
        fh.write("work\\n")
    return fractal("commit", "a link under .fractal")

attempt("commit", commit_link)
"""


def _digest(directory: Path) -> dict[str, str]:
    """Each regular file under ``directory`` (links not followed) -> its sha256."""
    return {str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.rglob("*")) if p.is_file() and not p.is_symlink()}


def _watched(tree: Tree, outside: Path) -> dict[str, dict[str, str]]:
    """What the attacks aim at: the outside directory whole, and the files of the other
    three that a seed write would replace (config.json, NODE.md, the steps)."""
    def seeds(node_dir: Path) -> dict[str, str]:
        return {k: v for k, v in _digest(node_dir).items()
                if k in ("config.json", "NODE.md") or k.startswith("steps/")}
    return {"outside": _digest(outside), "sibling": seeds(tree.node_dir("a.c")),
            "own": seeds(tree.node_dir("a.b")), "data": seeds(tree.repo / ".fractal" / "main")}


def test_a_linked_node_dir_on_the_parents_branch_is_never_followed(
        sandboxed_tree: Tree, tmp_path: Path) -> None:
    tree = sandboxed_tree
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("operator file\n")
    other = tmp_path / "other-agent.sh"
    other.write_text("#!/bin/sh\nexit 0\n")
    other.chmod(0o755)
    targets = {"outside": outside, "sibling": tree.node_dir("a.c"),
               "own": tree.node_dir("a.b"), "data": tree.repo / ".fractal" / "main"}
    facts = {"other_agent": str(other), "targets": {k: str(v) for k, v in targets.items()}}
    report_path = hostile_node(tree, tmp_path, ATTACKS, facts)
    for node, depth in (("a", "2"), ("a.b", "1")):  # b may spawn
        tree.cli("node", "config", "set", "--node", node, f"max_depth={depth}")
    before = _watched(tree, outside)
    tree.cli("node", "start", "a.b")
    assert tree.wait_settled("a.b", timeout=300) == "completed"
    report = read_report(report_path)
    assert _watched(tree, outside) == before  # no target changed
    assert sorted(p.name for p in outside.iterdir()) == ["keep.txt"]
    assert not (targets["data"] / "NODE.md").exists()
    assert not (targets["data"] / "steps").exists()
    tree.cli("node", "list")  # the root config still reads: the tree works
    for name in TARGETS:
        # each spawn succeeded, into a real node dir of the child's own
        assert report[name]["ok"] is True, (name, report[name])
        node_dir = tree.worktree(f"a.b.{name}") / ".fractal" / f"main.a.b.{name}"
        assert node_dir.is_dir() and not node_dir.is_symlink(), name
        assert f"INJECTED {name}" in (node_dir / "NODE.md").read_text()
        assert (node_dir / "config.json").is_file()
        tree_links = git(tree.repo, "ls-tree", "-r", f"main.a.b.{name}", "--", ".fractal")
        assert not [line for line in tree_links.splitlines() if line.startswith("120000")]
    # fractal commit drops every link under .fractal/, the committed ones included
    assert report["commit"]["ok"] is True, report["commit"]
    on_branch = git(tree.repo, "ls-tree", "-r", "main.a.b", "--", ".fractal")
    assert not [line for line in on_branch.splitlines() if line.startswith("120000")]
    assert "work.txt" in git(tree.repo, "ls-tree", "-r", "--name-only", "main.a.b")
