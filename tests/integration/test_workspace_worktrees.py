"""worktrees.py: add/remove (rollback), per-worktree identity, listing."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from fractal.errors import GitError
from fractal.workspace.git import branch_exists
from fractal.workspace.worktrees import (
    add_worktree,
    remove_worktree,
    set_identity,
    worktree_paths,
)
from tests.helpers import git


def _repo_without_identity(path: Path) -> Path:
    """A repo with one commit and no user.name/user.email configured anywhere."""
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    (path / "README.md").write_text("x\n")
    git(path, "add", "README.md")
    env = dict(os.environ, GIT_AUTHOR_NAME="Seed", GIT_AUTHOR_EMAIL="seed@example.com",
               GIT_COMMITTER_NAME="Seed", GIT_COMMITTER_EMAIL="seed@example.com")
    subprocess.run(["git", "commit", "-q", "-m", "seed"], cwd=path, env=env, check=True)
    return path


def test_add_then_remove_leaves_nothing_behind(repo: Path) -> None:
    wt = repo / ".worktrees" / "main.parser"
    add_worktree(repo, "main.parser", wt, "main")
    assert (wt / "README.md").is_file()
    assert branch_exists(repo, "main.parser")
    assert worktree_paths(repo)["main.parser"] == wt.resolve()
    (wt / "dirty.txt").write_text("uncommitted\n")
    remove_worktree(repo, wt, "main.parser")
    assert not wt.exists()
    assert not branch_exists(repo, "main.parser")
    assert "main.parser" not in worktree_paths(repo)
    assert str(wt) not in git(repo, "worktree", "list")


@pytest.mark.parametrize("damage", ["dir-deleted", "never-created", "branch-only"])
def test_remove_tolerates_partial_state(repo: Path, damage: str) -> None:
    wt = repo / ".worktrees" / "main.half"
    if damage == "dir-deleted":
        add_worktree(repo, "main.half", wt, "main")
        shutil.rmtree(wt)
    elif damage == "branch-only":
        git(repo, "branch", "main.half")
    remove_worktree(repo, wt, "main.half")
    assert not wt.exists()
    assert not branch_exists(repo, "main.half")
    assert set(worktree_paths(repo)) == {"main"}


def test_add_refuses_existing_branch(repo: Path) -> None:
    git(repo, "branch", "main.dup")
    with pytest.raises(GitError, match="already exists"):
        add_worktree(repo, "main.dup", repo / ".worktrees" / "main.dup", "main")


def test_add_refuses_unknown_base(repo: Path) -> None:
    with pytest.raises(GitError):
        add_worktree(repo, "main.b", repo / ".worktrees" / "main.b", "no-such-base")
    remove_worktree(repo, repo / ".worktrees" / "main.b", "main.b")
    assert not branch_exists(repo, "main.b")


def test_set_identity_without_any_configured_identity(tmp_path: Path) -> None:
    repo = _repo_without_identity(tmp_path / "bare-id")
    assert subprocess.run(["git", "config", "user.email"], cwd=repo,
                          capture_output=True).returncode == 1
    wt = repo / ".worktrees" / "main.parser"
    add_worktree(repo, "main.parser", wt, "main")
    set_identity(wt, "main.parser")
    (wt / "work.txt").write_text("w\n")
    git(wt, "add", "work.txt")
    git(wt, "commit", "-q", "-m", "work")
    assert git(wt, "log", "-1", "--format=%an <%ae>|%cn") == (
        "main.parser <main.parser@fractal.invalid>|main.parser"
    )
    # The main worktree is untouched: it still has no identity.
    assert subprocess.run(["git", "config", "user.name"], cwd=repo,
                          capture_output=True).returncode == 1


def test_set_identity_keeps_an_existing_email(repo: Path) -> None:
    wt = repo / ".worktrees" / "main.a"
    add_worktree(repo, "main.a", wt, "main")
    set_identity(wt, "main.a")
    set_identity(wt, "main.a")  # idempotent
    assert git(wt, "config", "user.name") == "main.a"
    assert git(wt, "config", "user.email") == "test@example.com"
    assert git(repo, "config", "user.name") == "Test User"


def test_worktree_paths_skips_detached(repo: Path) -> None:
    a = repo / ".worktrees" / "main.a"
    add_worktree(repo, "main.a", a, "main")
    git(repo, "worktree", "add", "-q", "--detach", str(repo / ".worktrees" / "det"), "main")
    assert worktree_paths(repo) == {"main": repo.resolve(), "main.a": a.resolve()}
    assert worktree_paths(a) == worktree_paths(repo)
