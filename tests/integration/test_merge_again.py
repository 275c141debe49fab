"""Merging a child again after a sibling's merge: only the child's new work travels, and
the sibling's work the target received meanwhile (or before the child's first merge)
stays. Real git, a real tree database."""

from __future__ import annotations

from pathlib import Path

from fractal.lifecycle.context import open_context
from fractal.lifecycle.merge.squash import merge_node
from fractal.lifecycle.spawn import init_node
from fractal.lifecycle.trees import init_tree
from tests.helpers import git, make_repo


def _commit(where: Path, rel: str, text: str) -> None:
    (where / rel).parent.mkdir(parents=True, exist_ok=True)
    (where / rel).write_text(text)
    git(where, "add", "-A")
    git(where, "commit", "-q", "-m", f"write {rel}")


def test_a_re_merge_keeps_the_siblings_work(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    tree = init_tree(repo).tree
    for name in ("a", "b", "c"):
        init_node(open_context(repo), name, {})
    wt = {n: tree.worktree_of(f"main.{n}") for n in ("a", "b", "c")}
    _commit(wt["b"], "out/b.txt", "b\n")
    assert merge_node(open_context(repo), "b").status == "merged"  # before a's first merge
    _commit(wt["a"], "out/a.txt", "a 1\n")
    assert merge_node(open_context(repo), "a").status == "merged"
    _commit(wt["c"], "out/c.txt", "c\n")
    assert merge_node(open_context(repo), "c").status == "merged"  # between a's two merges
    _commit(wt["a"], "out/a.txt", "a 2\n")
    again = merge_node(open_context(repo), "a")
    assert again.status == "merged" and again.files == 1
    listed = git(repo, "ls-tree", "-r", "--name-only", "main").split()
    assert {"out/a.txt", "out/b.txt", "out/c.txt"} <= set(listed)
    assert git(repo, "show", "main:out/a.txt").strip() == "a 2"
    assert merge_node(open_context(repo), "a").status == "nothing"
