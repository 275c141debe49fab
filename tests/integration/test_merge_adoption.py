"""A merge and a rescue write from a node's content only once its private git objects are
adopted (``lifecycle.adopting``): a child whose branch tip only its private object dir
holds (a supervisor killed mid-launch) merges whole, and one that needs a forged object
is refused with nothing written; ``node diff`` adopts a snapshot of a live launch's
commit; on real git and a real tree database."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import zlib
from pathlib import Path

import pytest

from fractal.errors import FractalError
from fractal.lifecycle.cleanup.delete import delete
from fractal.lifecycle.context import open_context
from fractal.lifecycle.merge.diff import node_diff
from fractal.lifecycle.merge.squash import merge_node
from fractal.lifecycle.steering.signal import Refused
from fractal.tree import Tree
from fractal.workspace.adoption import adopt, reads_whole, set_back
from fractal.workspace.gitfiles import git_dirs
from tests.helpers import copy_of_tree, git
from tests.integration.test_node_merge import _build


@pytest.fixture
def tree(tmp_path: Path) -> Tree:
    """``calc/ops.py`` committed, then nodes ``main.a`` and ``main.b`` (as
    ``test_node_merge``), ``main.a`` settled ``completed``."""
    repo = copy_of_tree(tmp_path / "repo", "merge-calc-a-b", _build)
    t = Tree(repo=repo, root="main")
    con = sqlite3.connect(t.db_path)
    try:
        with con:
            con.execute("UPDATE nodes SET status = 'completed' WHERE node = 'main.a'")
    finally:
        con.close()
    return t


def _private(tree: Tree) -> Path:
    dirs = git_dirs(tree.worktree_of("main.a"))
    assert dirs is not None
    private = dirs[0] / "objects"
    private.mkdir(exist_ok=True)
    return private


def _agent_commit(tree: Tree, text: str) -> tuple[str, str]:
    """Commit ``calc/new.py`` on main.a as a sandboxed agent does (every new object in
    the private dir); returns (the commit, the new file's blob)."""
    wt, private = tree.worktree_of("main.a"), _private(tree)
    env = {**os.environ, "GIT_OBJECT_DIRECTORY": str(private),
           "GIT_ALTERNATE_OBJECT_DIRECTORIES": str(tree.repo / ".git" / "objects")}
    (wt / "calc" / "new.py").write_text(text)
    for args in (["add", "-A"], ["commit", "-q", "-m", "agent work"]):
        subprocess.run(["git", *args], cwd=wt, env=env, check=True, capture_output=True)
    sha = git(wt, "rev-parse", "HEAD")
    blob = subprocess.run(["git", "rev-parse", "HEAD:calc/new.py"], cwd=wt, env=env,
                          check=True, capture_output=True, text=True).stdout.strip()
    return sha, blob


def _forge(private: Path, sha: str) -> None:
    path = private / sha[:2] / sha[2:]
    path.chmod(0o644)
    path.write_bytes(zlib.compress(b"blob 6\0forged"))


def _fsck(repo: Path, *more: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "fsck", "--no-dangling", *more], cwd=repo,
                          capture_output=True,
                          text=True, check=False,
                          env={**os.environ, "GIT_ALTERNATE_OBJECT_DIRECTORIES": ""})


def test_a_tip_only_the_private_dir_holds_is_adopted_and_merged_whole(tree: Tree) -> None:
    sha, _blob = _agent_commit(tree, "n = 1\n")
    assert not (tree.repo / ".git" / "objects" / sha[:2] / sha[2:]).exists()
    result = merge_node(open_context(tree.repo), "a")
    assert result.status == "merged"
    assert "calc/new.py" in git(tree.repo, "ls-tree", "-r", "--name-only", "main")
    assert (tree.repo / ".git" / "objects" / sha[:2] / sha[2:]).is_file()
    assert os.listdir(_private(tree)) == []  # a settled node's private dir is emptied
    fsck = _fsck(tree.repo)
    assert fsck.returncode == 0, fsck.stdout + fsck.stderr


def test_a_branch_that_needs_a_forged_object_is_never_merged(tree: Tree) -> None:
    """The commit and its trees check out, the blob does not: adoption takes the first
    two, and the tree in the shared store then names a blob it does not hold."""
    before = git(tree.repo, "rev-parse", "main")
    _sha, blob = _agent_commit(tree, "n = 2\n")
    private = _private(tree)
    _forge(private, blob)
    with pytest.raises(Refused) as refused:
        merge_node(open_context(tree.repo), "a")
    text = str(refused.value)
    assert "main.a's branch needs git objects its agent wrote that adoption refused" in text
    assert blob[2:] in text and "its content does not hash to its name" in text
    assert "nothing was written for the merge" in text
    assert "`fractal node start main.a --continue`" in text
    assert git(tree.repo, "rev-parse", "main") == before
    assert not (tree.repo / ".git" / "objects" / blob[:2] / blob[2:]).exists()
    assert (private / blob[:2] / blob[2:]).is_file()  # kept for the supervisor's set-back
    con = sqlite3.connect(tree.db_path)
    try:
        (status, metadata), = con.execute(
            "SELECT status, metadata FROM events WHERE node = 'main.a' AND event = 'merge'")
    finally:
        con.close()
    assert status == "failed" and "adoption refused" in metadata
    assert reads_whole(tree.repo / ".git", "main")
    # what the node's supervisor does at its next start: the branch set back, then merged
    common = tree.repo / ".git"
    assert "set back to" in set_back(tree.worktree_of("main.a"), common, "main.a", None)
    assert adopt(private, common, drain=True).refused
    fsck = _fsck(tree.repo, "--no-reflogs")  # main.a's reflog still names the refused
    # commit, whose tree names the missing blob: only the refs' own history is whole
    assert fsck.returncode == 0, fsck.stdout + fsck.stderr
    assert merge_node(open_context(tree.repo), "a").status == "nothing"


def test_a_delete_never_writes_a_rescue_ref_to_a_forged_object(tree: Tree) -> None:
    sha, _blob = _agent_commit(tree, "n = 3\n")
    _forge(_private(tree), sha)
    with pytest.raises(FractalError) as refused:
        delete(open_context(tree.repo), "a", force=True)
    assert str(refused.value).startswith(
        "cannot rescue main.a before delete, so nothing was removed: main.a's branch needs")
    assert tree.worktree_of("main.a").is_dir()
    assert git(tree.repo, "for-each-ref", "refs/fractal/rescue/") == ""


def test_diff_adopts_a_snapshot_of_a_live_launchs_commit(tree: Tree) -> None:
    con = sqlite3.connect(tree.db_path)
    try:
        with con:
            con.execute("UPDATE nodes SET status = 'active' WHERE node = 'main.a'")
    finally:
        con.close()
    sha, _blob = _agent_commit(tree, "n = 4\n")
    private = _private(tree)
    held = sorted(p.relative_to(private) for p in private.rglob("*"))
    shown = node_diff(open_context(tree.repo), "a", stat=True)
    assert "calc/new.py" in shown.text
    assert (tree.repo / ".git" / "objects" / sha[:2] / sha[2:]).is_file()
    assert sorted(p.relative_to(private) for p in private.rglob("*")) == held  # a snapshot
