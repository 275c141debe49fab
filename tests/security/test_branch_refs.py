"""A sandboxed agent cannot bend another branch through ``refs/heads`` (writable, for its
own commits): shadowing a branch kept only in ``packed-refs`` with a loose file of its own
fails (every branch gets its loose file before the launch, which the read-only bind
pins), and what it can still write is undone once the launch has ended, each repair a
``ref_restored`` event naming the ref: its own branch made a symbolic ref to a sibling's
(a merge would carry the sibling's unapproved work) is set back, a symbolic ref planted
under a new branch name is deleted, and a ``main.lock`` left behind (which blocks every
update of ``main``) is removed, and so is a directory in a lock's place, or a file no git
can read squatting a node's name. On the code before, each of these stayed."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.helpers import git
from tests.security.conftest import hostile_node, read_report
from tests.trees import Tree

pytestmark = pytest.mark.e2e

ATTACKS = """
def write(path, text):
    with open(path, "w") as fh:
        fh.write(text)
    return path

heads = FACTS["heads"]
attempt("shadow_packed", lambda: write(os.path.join(heads, "main"), FACTS["sibling_sha"] + "\\n"))
attempt("symbolic_own", lambda: write(os.path.join(heads, "main.a.b"),
                                      "ref: refs/heads/main.a.c\\n"))
attempt("symbolic_new", lambda: write(os.path.join(heads, "main.zzz"),
                                      "ref: refs/heads/main.a.c\\n"))
attempt("squat", lambda: write(os.path.join(heads, "main.squat"),
                               FACTS["main_sha"] + "\\n"))
attempt("lock", lambda: write(os.path.join(heads, "main.lock"), FACTS["sibling_sha"] + "\\n"))
attempt("lock_dir", lambda: os.makedirs(os.path.join(heads, "main.a.lock")))
attempt("broken_squat", lambda: (os.makedirs(os.path.join(heads, "main.yyy")),
                                 write(os.path.join(heads, "main.yyy", "junk"), "garbage\\n")))
"""


def _git_rc(cwd: Path, *args: str) -> int:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True,
                          check=False).returncode


def test_a_sandboxed_agent_cannot_bend_the_branch_refs(
        sandboxed_tree: Tree, tmp_path: Path) -> None:
    tree = sandboxed_tree
    heads = tree.repo / ".git" / "refs" / "heads"
    main = git(tree.repo, "rev-parse", "main")
    report_path = hostile_node(tree, tmp_path, ATTACKS, {
        "heads": str(heads), "sibling_sha": "0" * 40, "main_sha": main})
    own = git(tree.repo, "rev-parse", "main.a.b")
    # the sibling's own commit, so its branch differs from everyone's
    (tree.worktree("a.c") / "sibling.txt").write_text("unapproved\n")
    git(tree.worktree("a.c"), "add", "-A")
    git(tree.worktree("a.c"), "commit", "-q", "-m", "sibling work", "--no-verify")
    git(tree.repo, "pack-refs", "--all")  # every branch only in packed-refs
    assert not (heads / "main").exists()
    tree.cli("node", "start", "a.b")
    assert tree.wait_settled("a.b", timeout=300) == "completed", tree.cli(
        "node", "status", "a.b").stdout
    report = read_report(report_path)
    assert report["shadow_packed"]["ok"] is False, report["shadow_packed"]
    assert git(tree.repo, "rev-parse", "main") == main
    # its own branch is a plain ref again, holding its own work, none of the sibling's
    assert _git_rc(tree.repo, "symbolic-ref", "-q", "refs/heads/main.a.b") == 1
    assert (heads / "main.a.b").read_text().strip() != "ref: refs/heads/main.a.c"
    assert _git_rc(tree.repo, "merge-base", "--is-ancestor", own, "main.a.b") == 0
    assert "sibling work" not in git(tree.repo, "log", "--format=%s", "main.a.b")
    assert not (heads / "main.zzz").exists()
    assert report["squat"]["ok"] is True, report["squat"]  # written, then deleted
    assert not (heads / "main.squat").exists()
    tree.cli("node", "init", "squat")  # the name is free for the operator's node
    assert not (heads / "main.lock").exists()
    git(tree.repo, "update-ref", "refs/heads/main", main)  # the operator's update works
    # a directory in a lock's place, and a name squatted by a file git cannot read
    assert report["lock_dir"]["ok"] is True and not (heads / "main.a.lock").exists()
    assert report["broken_squat"]["ok"] is True and not (heads / "main.yyy").exists()
    git(tree.repo, "update-ref", "refs/heads/main.a", git(tree.repo, "rev-parse", "main.a"))
    tree.cli("node", "init", "yyy")
    restored = [str(m) for (m,) in tree.sql(
        "SELECT metadata FROM events WHERE node = 'main.a.b' AND event = 'ref_restored'")]
    for ref in ("refs/heads/main.a.b", "refs/heads/main.zzz", "refs/heads/main.lock",
                "refs/heads/main.squat", "refs/heads/main.a.lock", "refs/heads/main.yyy/junk"):
        assert any(m.startswith(ref + ":") for m in restored), (ref, restored)


def test_doctor_names_a_branch_that_points_at_no_commit(tree: Tree) -> None:
    """What an unsandboxed agent (or a damaged repository) can leave: ``main`` naming
    forty zeros. Before, doctor said nothing of the root's branch."""
    tree.node("a")
    (tree.repo / ".git" / "refs" / "heads" / "main").write_text("0" * 40 + "\n")
    doctor = tree.cli("doctor", check=False)
    assert doctor.returncode == 1, doctor.stdout
    assert doctor.stdout.splitlines()[0].startswith(
        "branch main: does not point at a commit"), doctor.stdout
