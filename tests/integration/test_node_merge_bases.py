"""The merge base a merge and a hand-back use once a child has been merged before: real git,
a real tree database, real merges.

A merged child's branch holds a merge-base advance: a commit with the child's own tree whose
second parent is the squash on the target. Git's own merge base is then that squash, whose
tree holds everything the target had then (its own work, siblings' merged work) that the
child never had; a merge on that base reads all of it as deleted by the child. These tests
keep the target's and the siblings' work through a hand-back after such an advance, and
keep a child's own appended file from conflicting when its last advance never landed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fractal.lifecycle.context import open_context
from fractal.lifecycle.merge.squash import merge_node
from fractal.lifecycle.spawn import init_node
from fractal.lifecycle.trees import init_tree
from fractal.tree import Tree
from fractal.workspace.merge import hand_back_merge, merge_base
from fractal.workspace.teardown import unmerged_commits
from tests.helpers import git, make_repo


def _commit(where: Path, rel: str, text: str, *, append: bool = False) -> None:
    path = where / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a" if append else "w", encoding="utf-8") as out:
        out.write(text)
    git(where, "add", "-A")
    git(where, "commit", "-q", "-m", f"write {rel}")


def _files(repo: Path, ref: str) -> set[str]:
    return set(git(repo, "ls-tree", "-r", "--name-only", ref).split())


@pytest.fixture
def tree(tmp_path: Path) -> Tree:
    repo = make_repo(tmp_path / "repo")
    tree = init_tree(repo).tree
    for name in ("a", "b"):
        init_node(open_context(repo), name, {})
    return tree


def test_a_hand_back_after_a_merge_keeps_the_targets_and_the_siblings_work(tree: Tree) -> None:
    repo, a, b = tree.repo, tree.worktree_of("main.a"), tree.worktree_of("main.b")
    _commit(repo, "own/1.txt", "the target's own work\n")  # the child never had it
    _commit(b, "out/b.txt", "b\n")
    assert merge_node(open_context(repo), "b").status == "merged"  # before a's first merge
    _commit(a, "out/a.txt", "a 1\n")
    assert merge_node(open_context(repo), "a").status == "merged"  # a's base advances
    _commit(repo, "clash.txt", "the target's line\n")
    _commit(a, "clash.txt", "a's line\n")
    handed = merge_node(open_context(repo), "a", hand_back=True)
    assert handed.status == "handed-back" and handed.conflicts == ("clash.txt",)
    # the child's worktree holds the target's tip and the one conflict, nothing deleted
    assert (a / "own" / "1.txt").read_text() == "the target's own work\n"
    assert (a / "out" / "b.txt").read_text() == "b\n"
    assert "<<<<<<<" in (a / "clash.txt").read_text()
    unmerged = git(a, "diff", "--name-only", "--diff-filter=U").split()
    assert unmerged == ["clash.txt"]
    deleted = git(a, "diff", "--cached", "--name-only", "--diff-filter=D").split()
    assert deleted == []
    git(a, "checkout", "--ours", "--", "clash.txt")  # what the soak agent does
    git(a, "add", "clash.txt")
    git(a, "commit", "-q", "--no-edit")
    assert len(git(a, "rev-list", "--parents", "-n", "1", "HEAD").split()) == 3  # a merge
    merged = merge_node(open_context(repo), "a")
    assert merged.status == "merged"
    assert {"own/1.txt", "out/a.txt", "out/b.txt", "clash.txt"} <= _files(repo, "main")
    assert git(repo, "show", "main:own/1.txt") == "the target's own work"
    assert git(repo, "show", "main:clash.txt") == "a's line"
    assert merge_node(open_context(repo), "a").status == "nothing"


def test_a_clean_hand_back_on_the_squash_base_is_left_staged_with_nothing_deleted(
        tree: Tree) -> None:
    repo, a = tree.repo, tree.worktree_of("main.a")
    _commit(repo, "own/0.txt", "before a's merge\n")
    _commit(a, "out/a.txt", "a 1\n")
    assert merge_node(open_context(repo), "a").status == "merged"
    _commit(repo, "own/1.txt", "after a's merge\n")
    child, target = git(repo, "rev-parse", "main.a"), git(repo, "rev-parse", "main")
    base = merge_base(repo, child, target)
    assert base == child  # the advance: git's own base would be the squash
    assert hand_back_merge(a, target, "a: merge main", base=base) == []
    assert (a / "own" / "0.txt").read_text() == "before a's merge\n"
    assert (a / "own" / "1.txt").read_text() == "after a's merge\n"
    assert (a / "out" / "a.txt").read_text() == "a 1\n"
    assert git(a, "diff", "--cached", "--name-only", "--diff-filter=D") == ""
    git(a, "commit", "-q", "--no-edit")
    assert git(a, "log", "-1", "--format=%P").split()[1] == target  # a real merge commit
    assert merge_node(open_context(repo), "a").status == "nothing"


def _merged_twice_without_the_last_advance(tree: Tree) -> None:
    """``main.a`` merged twice into main, its branch then put back to before the second
    merge's advance: as when the child committed during that merge, so the advance could
    not land."""
    repo, a = tree.repo, tree.worktree_of("main.a")
    _commit(a, "soak/log.txt", "line 1\n", append=True)
    assert merge_node(open_context(repo), "a").status == "merged"
    _commit(a, "soak/log.txt", "line 2\n", append=True)
    tip = git(repo, "rev-parse", "main.a")
    assert merge_node(open_context(repo), "a").status == "merged"
    git(repo, "update-ref", "refs/heads/main.a", tip)


def test_a_re_merge_after_an_advance_that_never_landed_does_not_conflict(tree: Tree) -> None:
    repo, a = tree.repo, tree.worktree_of("main.a")
    _merged_twice_without_the_last_advance(tree)
    _commit(a, "soak/log.txt", "line 3\n", append=True)
    again = merge_node(open_context(repo), "a")
    assert again.status == "merged" and again.conflicts == ()
    assert git(repo, "show", "main:soak/log.txt") == "line 1\nline 2\nline 3"
    assert merge_node(open_context(repo), "a").status == "nothing"


def test_a_hand_back_on_the_squash_base_can_be_abandoned(tree: Tree) -> None:
    repo, a = tree.repo, tree.worktree_of("main.a")
    _commit(a, "clash.txt", "a 1\n")
    assert merge_node(open_context(repo), "a").status == "merged"
    _commit(repo, "clash.txt", "the target's line\n")
    _commit(a, "clash.txt", "a 2\n")
    tip = git(a, "rev-parse", "HEAD")
    handed = merge_node(open_context(repo), "a", hand_back=True)
    assert handed.status == "handed-back" and handed.conflicts == ("clash.txt",)
    assert "You have unmerged paths" in git(a, "status")
    git(a, "merge", "--abort")
    assert git(a, "rev-parse", "HEAD") == tip
    assert git(a, "status", "--porcelain", "--untracked-files=no") == ""
    assert (a / "clash.txt").read_text() == "a 2\n"


def test_a_merged_child_has_no_unmerged_commits_though_its_target_has_work_of_its_own(
        tree: Tree) -> None:
    repo, a, b = tree.repo, tree.worktree_of("main.a"), tree.worktree_of("main.b")
    _commit(repo, "own/1.txt", "the target's own work\n")
    _commit(b, "out/b.txt", "b\n")
    assert merge_node(open_context(repo), "b").status == "merged"
    _commit(a, "out/a.txt", "a 1\n")
    assert merge_node(open_context(repo), "a").status == "merged"
    assert unmerged_commits(repo, "main.a", "main") == ()
    _commit(a, "out/a.txt", "a 2\n")
    assert unmerged_commits(repo, "main.a", "main") == ("write out/a.txt",)


def test_two_siblings_merged_with_delete_are_both_deleted(tree: Tree) -> None:
    """Each child of P writes its own file; each merge lands and deletes its child: the
    second child's branch holds nothing P lacks, whatever git's own base says."""
    from fractal.lifecycle.merge.squash import merge_then_clean

    repo = tree.repo
    for name in ("c1", "c2"):
        init_node(open_context(repo), name, {}, parent="a")
        _commit(tree.worktree_of(f"main.a.{name}"), f"{name}.txt", f"{name}\n")
    for name in ("c1", "c2"):
        done = merge_then_clean(open_context(repo), f"a.{name}", then="delete")
        assert done.status == "merged" and f"deleted main.a.{name}" in done.notices
    assert {"c1.txt", "c2.txt"} <= _files(repo, "main.a")
    assert not any(b.startswith("main.a.") for b in git(repo, "branch", "--format=%(refname:short)").split())


def test_delete_asks_the_merges_question_when_the_advance_never_landed(tree: Tree) -> None:
    """The child's last advance never landed (it moved during the merge) and the target
    went on editing the same file: the merge says nothing is new (its records name what
    landed), and so does the delete check."""
    repo = tree.repo
    _merged_twice_without_the_last_advance(tree)
    _commit(repo, "soak/log.txt", "the target's line\n", append=True)
    assert merge_node(open_context(repo), "a").status == "nothing"
    from fractal.lifecycle.merge.target import landed_merge

    assert unmerged_commits(repo, "main.a", "main", landed_merge(tree, "main.a", "main")) == ()
    from fractal.lifecycle.cleanup.delete import delete

    assert [d.branch for d in delete(open_context(repo), "a")] == ["main.a"]


def test_a_squash_lists_only_the_commits_since_the_last_recorded_merge(tree: Tree) -> None:
    """The child's last advance never landed, then a conflict was handed back and
    resolved: git's own base is right again, but the commits the last recorded merge
    took (its ``merges`` row) are not listed in the next squash's body again."""
    repo, a = tree.repo, tree.worktree_of("main.a")
    _merged_twice_without_the_last_advance(tree)
    _commit(repo, "own.txt", "the target's own work\n")
    _commit(repo, "clash.txt", "the target's line\n")
    _commit(a, "clash.txt", "a's line\n")
    assert merge_node(open_context(repo), "a", hand_back=True).status == "handed-back"
    git(a, "checkout", "--ours", "--", "clash.txt")
    git(a, "add", "clash.txt")
    git(a, "commit", "-q", "--no-edit")
    from fractal.lifecycle.merge.target import landed_merge

    landed = landed_merge(tree, "main.a", "main")
    assert unmerged_commits(repo, "main.a", "main", landed) == ("write clash.txt",)
    assert merge_node(open_context(repo), "a").status == "merged"
    body = git(repo, "log", "-1", "--format=%b", "main").splitlines()
    assert [line for line in body if line.startswith("- ")] == ["- write clash.txt"]
    assert git(repo, "show", "main:soak/log.txt") == "line 1\nline 2"
    assert git(repo, "show", "main:clash.txt") == "a's line"


def test_a_hand_back_resolved_by_keeping_the_childs_side_merges_the_childs_work(
        tree: Tree) -> None:
    """The child resolves the conflict handed back by keeping its own side: its
    resolution commit has its own tree and the target's tip as second parent, as a
    merge-base advance has, but it is no advance: the merge brings the child's work."""
    from fractal.lifecycle.merge.diff import node_diff
    from fractal.lifecycle.merge.squash import MergeConflict

    repo, a = tree.repo, tree.worktree_of("main.a")
    _commit(a, "README.md", "X\n")
    _commit(a, "x-only.txt", "new\n")
    (repo / "README.md").write_text("M\n")  # the target's only change: the README
    git(repo, "commit", "-q", "-m", "main edits README", "--", "README.md")
    with pytest.raises(MergeConflict):
        merge_node(open_context(repo), "a")
    assert merge_node(open_context(repo), "a", hand_back=True).status == "handed-back"
    git(a, "checkout", "--ours", "--", "README.md")
    git(a, "add", "README.md")
    git(a, "commit", "-q", "--no-edit")
    assert "x-only.txt" in node_diff(open_context(repo), "a", stat=True).text
    assert unmerged_commits(repo, "main.a", "main") != ()
    merged = merge_node(open_context(repo), "a")
    assert merged.status == "merged"
    assert git(repo, "show", "main:README.md") == "X"
    assert git(repo, "show", "main:x-only.txt") == "new"
    assert merge_node(open_context(repo), "a").status == "nothing"
