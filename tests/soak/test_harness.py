"""The soak's operator upkeep commits a settled node's leftovers under the worktree's
commit turn (``commit_lock.commit_turn``), as ``fractal commit`` and the loop's backstop
do: never beside a commit already running there."""

from __future__ import annotations

from pathlib import Path

from fractal.workspace.commit_lock import commit_turn
from tests.helpers import git
from tests.soak.harness import keep_leftovers


def test_leftovers_wait_for_the_commit_turn_then_commit(repo: Path) -> None:
    (repo / "left.txt").write_text("left behind\n")
    head = git(repo, "rev-parse", "HEAD")
    with commit_turn(repo):  # a commit in flight in the worktree
        assert keep_leftovers(repo, wait=0.2) is False
        assert git(repo, "rev-parse", "HEAD") == head
        assert git(repo, "status", "--porcelain") == "?? left.txt"  # not even staged
    assert keep_leftovers(repo) is True
    assert git(repo, "log", "-1", "--format=%s") == "operator: keep leftovers"
    assert git(repo, "status", "--porcelain") == ""
    assert keep_leftovers(repo) is False  # nothing left


def test_leftovers_of_a_worktree_that_is_gone_are_nothing(tmp_path: Path) -> None:
    assert keep_leftovers(tmp_path / "removed") is False
