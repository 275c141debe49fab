"""The git-dir reads that answer ``current_branch`` and ``branch_exists`` without a git
process agree with git itself: main checkout and linked worktree, detached HEAD, packed,
loose and missing refs, and the cases that must still ask git."""

from __future__ import annotations

from pathlib import Path

import pytest

from fractal.workspace import git as g
from tests.helpers import git


def _asked_git(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    calls: list[list[str]] = []
    real = g.run_git

    def recording(args: list[str], cwd: Path, **kwargs: object) -> object:
        calls.append(list(args))
        return real(args, cwd, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(g, "run_git", recording)
    return calls


def _worktree(repo: Path, branch: str) -> Path:
    path = repo.parent / f"wt-{branch}"
    git(repo, "worktree", "add", "-q", "-b", branch, str(path))
    return path


def test_branch_and_refs_of_main_and_linked_worktrees_without_git(
        repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    linked = _worktree(repo, "main.child")
    calls = _asked_git(monkeypatch)
    assert g.current_branch(repo) == "main"
    assert g.current_branch(linked) == "main.child"
    assert g.branch_exists(linked, "main") and g.branch_exists(repo, "main.child")
    assert calls == []


def test_detached_head_reads_none(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    git(repo, "checkout", "-q", "--detach")
    calls = _asked_git(monkeypatch)
    assert g.current_branch(repo) is None
    assert calls == []


def test_packed_and_missing_refs_ask_git(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    git(repo, "branch", "other")
    git(repo, "pack-refs", "--all")
    calls = _asked_git(monkeypatch)
    assert g.branch_exists(repo, "other")
    assert not g.branch_exists(repo, "gone")
    assert not g.branch_exists(repo, "/etc/hostname")
    assert len(calls) == 3


def test_a_subdirectory_or_a_relocated_git_dir_asks_git(
        repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sub = repo / "sub"
    sub.mkdir()
    calls = _asked_git(monkeypatch)
    assert g.current_branch(sub) == "main"
    assert len(calls) == 1
    monkeypatch.setenv("GIT_DIR", str(repo / ".git"))
    assert g.git_dirs(repo) is None


def test_worktree_status_says_when_the_index_matches_head(repo: Path) -> None:
    (repo / "new.txt").write_text("x\n")
    assert g.worktree_status(repo) == (["new.txt"], True)
    (repo / "README.md").write_text("changed\n")
    assert g.worktree_status(repo) == (["README.md", "new.txt"], True)
    git(repo, "add", "new.txt")
    paths, index_clean = g.worktree_status(repo)
    assert sorted(paths) == ["README.md", "new.txt"] and not index_clean
