"""The tree's ``sandbox`` setting through the real CLI: ``auto`` on a machine where no
sandbox can run starts no agent and says how to get one or opt out; ``off`` runs the
agent unsandboxed and ``node status`` says so; a node's own ``config.json`` cannot switch
the tree's sandbox off for itself."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.helpers import git, wait_until
from tests.trees import Tree, set_sandbox

pytestmark = pytest.mark.e2e


def _path_without_bwrap(tmp_path: Path) -> str:
    """A PATH of one directory linking every program on this PATH but ``bwrap``."""
    bindir = tmp_path / "nobwrap"
    bindir.mkdir()
    for entry in os.environ.get("PATH", "").split(os.pathsep):
        if not entry or not os.path.isdir(entry):
            continue
        for name in os.listdir(entry):
            target = bindir / name
            if name != "bwrap" and not target.exists() and not target.is_symlink():
                target.symlink_to(Path(entry) / name)
    return str(bindir)


def test_auto_where_no_sandbox_runs_refuses_and_says_how(sandboxed_tree: Tree,
                                                         tmp_path: Path) -> None:
    tree = sandboxed_tree
    set_sandbox(tree.repo, "auto")
    tree.node("x", {"01-A.md": "[stub:write=done.txt:ran]"}, "--no-sync", "--max-iters", "1")
    env = {**os.environ, "PATH": _path_without_bwrap(tmp_path)}
    tree.cli("node", "start", "x", env=env)
    assert tree.wait_settled("x", timeout=120) != "completed"
    ((reason,),) = tree.sql("SELECT metadata FROM runs WHERE node = 'main.x'")
    assert "cannot sandbox the agent: bwrap (bubblewrap) is not on PATH" in str(reason)
    for fix in ("apt-get install bubblewrap", '"sandbox": "off"'):
        assert fix in str(reason), reason
    assert tree.sql("SELECT COUNT(*) FROM steps WHERE node = 'main.x'") == [(0,)]
    assert not (tree.worktree("x") / "done.txt").exists()


def test_off_runs_unsandboxed_and_status_says_so(sandboxed_tree: Tree,
                                                 tmp_path: Path) -> None:
    tree = sandboxed_tree
    set_sandbox(tree.repo, "off")
    release = tmp_path / "release"
    outside = tree.repo / "outside.txt"
    tree.node("x", {"01-A.md": f"[stub:write=../../outside.txt:x][stub:wait-file={release}]"},
              "--no-sync", "--max-iters", "1")
    tree.cli("node", "start", "x")
    wait_until(lambda: outside.exists(), timeout=60, message="the agent wrote outside")
    shown = tree.cli("node", "status", "x")
    assert shown.stdout.strip() == "active (run 1)"
    assert "main.x runs unsandboxed" in shown.stderr
    assert "the tree runs its agents unsandboxed" in tree.cli("inbox").stderr
    release.write_text("go")
    assert tree.wait_settled("x", timeout=120) == "completed"


def test_a_nodes_own_config_cannot_switch_the_sandbox_off(sandboxed_tree: Tree) -> None:
    tree = sandboxed_tree
    ndir = tree.node("x", {"01-A.md": "[stub:write=../../outside.txt:x]"}, "--no-sync",
                     "--max-iters", "1")
    config = ndir / "config.json"
    config.write_text(config.read_text().replace('"user": false', '"sandbox": "off", '
                                                 '"user": false'))
    assert '"sandbox": "off"' in config.read_text()
    git(tree.worktree("x"), "commit", "-qam", "sandbox off for me", "--no-verify")
    tree.cli("node", "start", "x")
    tree.wait_settled("x", timeout=120)
    assert not (tree.repo / "outside.txt").exists()
    assert {s for (s,) in tree.sql("SELECT status FROM steps WHERE node = 'main.x'")} == {
        "failed"}  # the write outside failed, and its retry
