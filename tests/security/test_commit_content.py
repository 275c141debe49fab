"""Attacks on what a commit or a merge carries: conflict markers committed unresolved and
carried up to ``main``; a legitimate file with marker-like lines that could never be
committed; a nested repository committed as a bare gitlink whose files a merge or retire
then deletes."""

from __future__ import annotations

from pathlib import Path

import pytest

from fractal.lifecycle.commit import CommitMode
from fractal.runtime.iteration import backstop
from fractal.workspace.commit_types import NestedRepository, UnresolvedConflict
from fractal.workspace.handback import HandBack, write_note
from tests.fakes import RecordingReporter
from tests.helpers import git
from tests.integration.test_commit_pipeline import Node, make_node
from tests.trees import run_cli_as

HUNK = "<<<<<<< HEAD\nx = 1\n=======\nx = 2\n>>>>>>> main\n"
TUTORIAL = f"# Resolving a conflict\n\nGit writes:\n\n{HUNK}\nKeep one side.\n"


@pytest.fixture
def node(tmp_path: Path) -> Node:
    return make_node(tmp_path)


# -- conflict markers -----------------------------------------------------------------------

def test_markers_committed_by_hand_are_refused_at_merge_unless_forced(node: Node) -> None:
    """The reported path: the child concluded a hand-back with ``git commit --no-edit``
    without editing the file; the next ``node merge`` must not carry the lines up."""
    node.write("calc.py", HUNK)
    git(node.wt, "add", "calc.py")
    git(node.wt, "commit", "-q", "--no-verify", "-m", "concluded without resolving")
    before = git(node.repo, "rev-parse", "main")
    out = run_cli_as(node.repo, "node", "merge", "a")
    assert out.returncode == 1
    assert "adds conflict-marker lines" in out.stderr and "calc.py" in out.stderr
    assert "--force" in out.stderr
    assert git(node.repo, "rev-parse", "main") == before
    forced = run_cli_as(node.repo, "node", "merge", "a", "--force")
    assert forced.returncode == 0, forced.stderr
    assert git(node.repo, "show", "main:calc.py") == HUNK.rstrip("\n")


def test_markers_the_target_already_holds_do_not_block_a_merge(node: Node) -> None:
    (node.repo / "tutorial.md").write_text(TUTORIAL)
    git(node.repo, "add", "tutorial.md")
    git(node.repo, "commit", "-q", "--no-verify", "-m", "a tutorial on main")
    git(node.wt, "merge", "-q", "--no-verify", "main")
    node.write("tutorial.md", TUTORIAL + "\nOne more tip.\n")
    git(node.wt, "commit", "-q", "--no-verify", "-am", "edit the tutorial")
    out = run_cli_as(node.repo, "node", "merge", "a")
    assert out.returncode == 0, out.stderr


def test_a_marker_like_file_written_on_purpose_commits_with_force(node: Node) -> None:
    node.write("docs/tutorial.md", TUTORIAL)
    with pytest.raises(UnresolvedConflict):
        node.commit("add the tutorial")  # not said to be on purpose: refused as before
    node.commit("add the tutorial", mode=CommitMode.FORCE)
    assert git(node.wt, "show", "HEAD:docs/tutorial.md") == TUTORIAL.rstrip("\n")
    node.write("docs/tutorial.md", TUTORIAL + "\nAnd a closing note.\n")
    node.commit("extend the tutorial")  # its old hunk no longer blocks a plain commit
    assert "closing note" in git(node.wt, "show", "HEAD:docs/tutorial.md")


def test_force_never_commits_markers_in_a_handed_back_file(node: Node) -> None:
    write_note(node.paths.node_dir, HandBack("main", git(node.repo, "rev-parse", "main"),
                                             ("calc.py",)))
    node.write("calc.py", HUNK)
    head = node.head()
    with pytest.raises(UnresolvedConflict, match=r"calc\.py"):
        node.commit("resolve", mode=CommitMode.FORCE)
    assert node.head() == head


# -- nested repositories --------------------------------------------------------------------

def _nested(node: Node) -> Path:
    sub = node.wt / "crate"
    sub.mkdir()
    (sub / "lib.rs").write_text("pub fn f() {}\n")
    git(sub, "init", "-q", "-b", "main")
    git(sub, "add", "lib.rs")
    git(sub, "-c", "user.name=T", "-c", "user.email=t@e.invalid", "commit", "-q", "-m", "s")
    return sub


def test_fractal_commit_refuses_a_nested_repository_with_the_fix(node: Node) -> None:
    _nested(node)
    head = node.head()
    for mode in (CommitMode.ITERATION, CommitMode.FORCE):
        with pytest.raises(NestedRepository) as caught:
            node.commit("scaffold", mode=mode)
        assert "crate" in str(caught.value) and "git submodule add" in str(caught.value)
        assert "git rm --cached crate" in str(caught.value)
    assert node.head() == head


def test_a_staged_gitlink_is_refused_too(node: Node) -> None:
    _nested(node)
    git(node.wt, "add", "crate")  # the gitlink git warns about
    with pytest.raises(NestedRepository):
        node.commit("scaffold", mode=CommitMode.FORCE)


def test_the_backstop_leaves_a_nested_repository_on_disk_and_says_why(node: Node) -> None:
    sub = _nested(node)
    node.write("other.txt", "kept for the next commit\n")
    head = node.head()
    reporter = RecordingReporter()
    sha, problem = backstop(node.wt, "main.a: iteration 1.1 (auto)", "", reporter,
                            branch="main.a")
    assert sha is None and problem is not None
    assert "nested git repository in crate" in problem
    assert node.head() == head
    assert (sub / "lib.rs").read_text() == "pub fn f() {}\n"
    assert git(node.wt, "diff", "--cached", "--name-only") == ""


def test_a_fixed_nested_repository_commits_its_files(node: Node) -> None:
    import shutil

    sub = _nested(node)
    shutil.rmtree(sub / ".git")
    node.commit("scaffold")
    assert git(node.wt, "show", "HEAD:crate/lib.rs") == "pub fn f() {}"


def test_a_gitlink_committed_by_hand_is_refused_at_merge(node: Node) -> None:
    _nested(node)
    git(node.wt, "add", "crate")
    git(node.wt, "commit", "-q", "--no-verify", "-m", "gitlink")
    out = run_cli_as(node.repo, "node", "merge", "a", "--retire")
    assert out.returncode == 1
    assert "gitlink" in out.stderr
    assert (node.wt / "crate" / "lib.rs").exists()
