"""A status started ahead (the backstop's) is used only while no commit came in between."""

from __future__ import annotations

from pathlib import Path

from fractal.workspace.git import worktree_status
from fractal.workspace.status_ahead import start_worktree_status
from tests.helpers import git_with_identity


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    git_with_identity(repo, "init", "-q", "-b", "main")
    (repo / "a.txt").write_text("a\n")
    git_with_identity(repo, "add", "a.txt")
    git_with_identity(repo, "commit", "-q", "-m", "one")
    return repo


def test_the_answer_is_the_status_of_the_worktree(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    (repo / "a.txt").write_text("changed\n")
    (repo / "new.txt").write_text("new\n")
    pending = start_worktree_status(repo)
    assert pending is not None
    assert pending.result() == worktree_status(repo) == (["a.txt", "new.txt"], True)


def test_a_commit_in_between_voids_the_answer(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    (repo / "new.txt").write_text("new\n")
    pending = start_worktree_status(repo)
    assert pending is not None
    git_with_identity(repo, "add", "new.txt")
    git_with_identity(repo, "commit", "-q", "-m", "two")
    assert pending.result() is None
    assert worktree_status(repo) == ([], True)


def test_staging_in_between_voids_the_answer(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    (repo / "new.txt").write_text("new\n")
    pending = start_worktree_status(repo)
    assert pending is not None
    git_with_identity(repo, "add", "new.txt")
    assert pending.result() is None


def test_below_the_checkout_top_nothing_is_started(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    (repo / "sub").mkdir()
    assert start_worktree_status(repo / "sub") is None


def test_a_discarded_status_is_collected_once(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    pending = start_worktree_status(repo)
    assert pending is not None
    pending.discard()
    pending.discard()
    assert pending.result() == ([], True)
