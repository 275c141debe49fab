"""Attack (or accident): a node renames its branch away, so it reads ``missing``; the
operator's ``delete --force`` promised to keep everything on a rescue ref, wrote none and
removed the worktree with its uncommitted files. Now the checkout is rescued first."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import copy_of_tree, git, make_repo
from tests.trees import run_cli_as


def _build(repo: Path) -> None:
    make_repo(repo)
    for args in (["init"], ["node", "init", "a"]):
        out = run_cli_as(repo, *args)
        assert out.returncode == 0, out.stderr


def test_delete_force_of_a_missing_node_writes_its_rescue_ref(tmp_path: Path) -> None:
    repo = copy_of_tree(tmp_path / "repo", "security-rescue", _build)
    child = repo / ".worktrees" / "main.a"
    (child / "committed.txt").write_text("on the renamed branch\n")
    git(child, "add", "committed.txt")
    git(child, "commit", "-q", "-m", "work")
    git(child, "branch", "-m", "main.a", "elsewhere")  # the node's branch is gone
    (child / "unsaved.txt").write_text("never committed\n")
    out = run_cli_as(repo, "node", "delete", "a", "--force")
    assert out.returncode == 0, out.stderr
    assert not child.exists()
    refs = git(repo, "for-each-ref", "--format=%(refname)", "refs/fractal/rescue/main.a/")
    assert refs.count("\n") == 0 and refs, refs
    assert f"rescue ref {refs}" in out.stderr
    assert git(repo, "show", f"{refs}:unsaved.txt") == "never committed"
    assert git(repo, "show", f"{refs}:committed.txt") == "on the renamed branch"


def test_delete_of_a_node_with_neither_branch_nor_worktree_says_nothing_was_saved(
        tmp_path: Path) -> None:
    repo = copy_of_tree(tmp_path / "repo", "security-rescue", _build)
    git(repo, "worktree", "remove", "--force", str(repo / ".worktrees" / "main.a"))
    git(repo, "branch", "-D", "main.a")
    out = run_cli_as(repo, "node", "delete", "a", "--force")
    assert out.returncode == 0, out.stderr
    assert "nothing to rescue" in out.stderr
    assert git(repo, "for-each-ref", "refs/fractal/rescue/main.a/") == ""


def test_a_nested_repository_stops_a_forced_delete_before_anything_goes(
        tmp_path: Path) -> None:
    """A rescue ref would hold the nested repository as a bare pointer, so the delete is
    refused, naming it, and its files stay."""
    repo = copy_of_tree(tmp_path / "repo", "security-rescue", _build)
    crate = repo / ".worktrees" / "main.a" / "crate"
    crate.mkdir()
    (crate / "lib.rs").write_text("pub fn f() {}\n")
    git(crate, "init", "-q")
    git(crate, "add", "lib.rs")
    git(crate, "-c", "user.name=T", "-c", "user.email=t@e.invalid", "commit", "-q", "-m", "s")
    out = run_cli_as(repo, "node", "delete", "a", "--force")
    assert out.returncode != 0
    assert "crate is a nested git repository" in out.stderr
    assert (crate / "lib.rs").read_text() == "pub fn f() {}\n"
    assert git(repo, "for-each-ref", "refs/fractal/rescue/main.a/") == ""
