"""Attack (the fourth review's case 3): a sandboxed agent plants symbolic links in its own
git dir (``.git/worktrees/<branch>/``, writable from inside, since ``git commit`` writes
there) under the names a hand-back writes: the index copy it built beside the index, and
``MERGE_MSG``, ``MERGE_MODE``, ``ORIG_HEAD``, ``MERGE_HEAD``. The operator's ``node merge
--hand-back`` ran as the operator and wrote through every one, so any file the operator
can write was overwritten (or made). Now the index copy is built in the repository's
scratch dir and each file is renamed into place, replacing a link, never following it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import git
from tests.security.conftest import hostile_node, read_report
from tests.trees import Tree

pytestmark = pytest.mark.e2e

NAMES = ("index.fractal-hand-back", "MERGE_MSG", "MERGE_MODE", "ORIG_HEAD")

ATTACKS = """
with open("X", "w") as fh:
    fh.write("three\\n")
subprocess.run(["git", "add", "X"], check=True)
subprocess.run(["git", "commit", "-q", "-m", "b: X=three"], check=True)
gitdir = subprocess.run(["git", "rev-parse", "--absolute-git-dir"], check=True,
                        capture_output=True, text=True).stdout.strip()
def plant(name, target):
    path = os.path.join(gitdir, name)
    if os.path.lexists(path):
        os.unlink(path)
    os.symlink(target, path)
for name, target in FACTS["links"].items():
    attempt("plant " + name, lambda name=name, target=target: plant(name, target))
"""


def test_a_hand_back_never_writes_through_a_link_in_the_childs_git_dir(
        sandboxed_tree: Tree, tmp_path: Path) -> None:
    tree = sandboxed_tree
    victims = tmp_path / "victims"
    victims.mkdir()
    links = {name: str(victims / name) for name in NAMES}
    for name in NAMES:
        (victims / name).write_text("the operator's precious file\n")
    links["MERGE_HEAD"] = str(victims / "made-MERGE_HEAD")  # dangling: a file made there
    report_path = hostile_node(tree, tmp_path, ATTACKS, {"links": links})
    child, parent = tree.worktree("a.b"), tree.worktree("a")
    # merged once, so the next hand-back starts from that merge (an explicit base)
    (child / "X").write_text("one\n")
    git(child, "add", "X")
    git(child, "commit", "-q", "-m", "b: X=one")
    tree.cli("node", "merge", "a.b")
    (parent / "X").write_text("parent's change\n")
    git(parent, "commit", "-q", "-am", "a: X")
    tree.cli("node", "start", "a.b")
    tree.wait_settled("a.b", timeout=300)
    report = read_report(report_path)
    for name in links:
        assert report[f"plant {name}"]["ok"] is True, report[f"plant {name}"]
    conflict = tree.cli("node", "merge", "a.b", check=False)
    assert conflict.returncode != 0 and "conflict" in conflict.stderr, conflict.stderr
    out = tree.cli("node", "merge", "a.b", "--hand-back")
    assert "handed the conflict back to main.a.b" in out.stdout + out.stderr
    for name in NAMES:
        assert (victims / name).read_text() == "the operator's precious file\n", name
    assert not (victims / "made-MERGE_HEAD").exists()
    # the hand-back itself happened: a merge in progress with the conflict in X
    gitdir = tree.gitdir("a.b")
    assert not (gitdir / "MERGE_HEAD").is_symlink()
    assert (gitdir / "MERGE_HEAD").read_text().strip() == git(parent, "rev-parse", "HEAD")
    assert "<<<<<<<" in (child / "X").read_text()
    assert git(child, "ls-files", "-u", "X")


REFLOGS = """
with open("Y", "w") as fh:
    fh.write("work\\n")
subprocess.run(["git", "add", "Y"], check=True)
subprocess.run(["git", "commit", "-q", "-m", "b: Y"], check=True)
gitdir = subprocess.run(["git", "rev-parse", "--absolute-git-dir"], check=True,
                        capture_output=True, text=True).stdout.strip()
def plant(path, target):
    if os.path.lexists(path):
        os.unlink(path)
    os.symlink(target, path)
attempt("plant logs/HEAD", lambda: plant(os.path.join(gitdir, "logs", "HEAD"),
                                         FACTS["head"]))
"""


def test_a_merge_never_appends_a_reflog_line_through_a_link_the_child_planted(
        sandboxed_tree: Tree, tmp_path: Path) -> None:
    """Git appends each reflog line by opening the file, following a link; the merge's
    advance commit on the child's branch, made as the operator, wrote one line into
    whatever file the child's ``logs/HEAD`` named. (Its own branch reflog is a mount
    point inside the sandbox, so it cannot be swapped for a link; the sweep before every
    git covers it too, for a ``sandbox: off`` tree.)"""
    tree = sandboxed_tree
    victims = tmp_path / "victims"
    victims.mkdir()
    (victims / "head").write_text("the operator's precious file\n")
    report_path = hostile_node(tree, tmp_path, REFLOGS, {"head": str(victims / "head")})
    tree.cli("node", "start", "a.b")
    tree.wait_settled("a.b", timeout=300)
    report = read_report(report_path)
    assert report["plant logs/HEAD"]["ok"] is True, report["plant logs/HEAD"]
    tree.cli("node", "merge", "a.b")
    assert git(tree.worktree("a"), "show", "HEAD:Y") == "work"
    assert "merged into main.a" in git(tree.worktree("a.b"), "log", "-1", "--format=%s")
    assert (victims / "head").read_text() == "the operator's precious file\n"
    assert not (tree.gitdir("a.b") / "logs" / "HEAD").is_symlink()
