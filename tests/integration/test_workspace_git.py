"""git.py against real repositories: queries, changed paths, failures carrying stderr."""

from __future__ import annotations

from pathlib import Path

import pytest

from fractal.errors import GitError
from fractal.workspace import git as g
from fractal.workspace.worktrees import add_worktree
from tests.helpers import git


def test_run_git_failure_carries_stderr(repo: Path) -> None:
    with pytest.raises(GitError, match=r"exit 128\): fatal: Needed a single revision"):
        g.run_git(["rev-parse", "--verify", "no-such-ref"], repo)
    proc = g.run_git(["rev-parse", "--verify", "no-such-ref"], repo, check=False)
    assert proc.returncode != 0


def test_run_git_outside_a_repository(tmp_path: Path) -> None:
    with pytest.raises(GitError, match="not a git repository"):
        g.run_git(["rev-parse", "--show-toplevel"], tmp_path)


def test_toplevel_outside_a_repository_says_so_plainly(tmp_path: Path) -> None:
    with pytest.raises(GitError) as info:
        g.toplevel(tmp_path)
    assert str(info.value) == (f"{tmp_path.resolve()} is not inside a git repository; run "
                               "fractal from your project's repository (or pass --path DIR)")


def test_run_git_env_and_c_locale(repo: Path) -> None:
    out = g.run_git(["var", "GIT_AUTHOR_IDENT"], repo, env={"GIT_AUTHOR_NAME": "Envy"}).stdout
    assert out.startswith("Envy ")


def test_paths_from_main_and_linked_worktrees(repo: Path) -> None:
    wt = repo / ".worktrees" / "main.a"
    add_worktree(repo, "main.a", wt, "main")
    (wt / "sub").mkdir()
    assert g.toplevel(wt / "sub") == wt.resolve()
    assert g.common_dir(wt) == (repo / ".git").resolve()
    assert g.common_dir(repo) == (repo / ".git").resolve()
    assert g.repo_root(wt / "sub") == repo.resolve()
    assert g.repo_root(repo) == repo.resolve()
    assert g.current_branch(wt) == "main.a"
    assert g.current_branch(repo) == "main"


def test_branch_head_and_log(repo: Path) -> None:
    sha = g.head_sha(repo)
    assert len(sha) == 40 and sha == git(repo, "rev-parse", "HEAD")
    assert g.head_sha(repo, "main") == sha
    assert g.branch_exists(repo, "main")
    assert not g.branch_exists(repo, "main.nope")
    (repo / "f.txt").write_text("x\n")
    git(repo, "add", "f.txt")
    git(repo, "commit", "-q", "-m", "second")
    assert g.log_subjects(repo, "main", 5) == ["second", "initial commit"]
    assert g.log_subjects(repo, "HEAD", 1) == ["second"]
    assert g.log_subjects(repo, "HEAD", 0) == []
    with pytest.raises(GitError):
        g.head_sha(repo, "no-such-ref")


def test_current_branch_detached(repo: Path) -> None:
    git(repo, "checkout", "-q", "--detach")
    assert g.current_branch(repo) is None


def test_has_remote(repo: Path, tmp_path: Path) -> None:
    assert not g.has_remote(repo)
    git(repo, "remote", "add", "origin", str(tmp_path / "elsewhere.git"))
    assert g.has_remote(repo)
    assert not g.has_remote(repo, "upstream")


def test_changed_paths_lists_changes_and_hides_artifacts(repo: Path) -> None:
    assert g.changed_paths(repo) == []
    assert not g.is_dirty(repo)
    (repo / "tracked.txt").write_text("a\n")
    (repo / "old.txt").write_text("old\n")
    git(repo, "add", "tracked.txt", "old.txt")
    git(repo, "commit", "-q", "-m", "two files")
    (repo / "README.md").write_text("modified\n")            # modified, unstaged
    (repo / "staged.txt").write_text("s\n")
    git(repo, "add", "staged.txt")                           # staged new file
    git(repo, "mv", "old.txt", "new name.txt")               # staged rename
    (repo / "tracked.txt").unlink()                          # deleted
    (repo / "deep" / "dir").mkdir(parents=True)
    (repo / "deep" / "dir" / "u.txt").write_text("u\n")      # untracked, nested
    node = repo / ".fractal" / "main.x"
    (node / "tmp").mkdir(parents=True)
    (node / "setup.log").write_text("log\n")
    (node / "claude.err").write_text("err\n")
    (node / "tmp" / "scratch").write_text("t\n")
    (node / "NODE.md").write_text("task\n")
    (repo / "a.db-wal").write_text("w\n")
    (repo / ".venv" / "bin").mkdir(parents=True)
    (repo / ".venv" / "bin" / "python").write_text("py\n")
    paths = g.changed_paths(repo)
    assert sorted(paths) == sorted([
        "README.md", "staged.txt", "new name.txt", "old.txt", "tracked.txt",
        "deep/dir/u.txt", ".fractal/main.x/NODE.md",
    ])
    assert g.is_dirty(repo)


def test_only_artifacts_reads_clean(repo: Path) -> None:
    (repo / ".status").write_text("active\n")
    (repo / "x.db").write_text("db\n")
    assert g.changed_paths(repo) == []
    assert not g.is_dirty(repo)


def test_non_utf8_file_name_is_replaced_not_fatal(repo: Path) -> None:
    raw = bytes(repo) + b"/bad-\xff.txt"
    with open(raw, "wb") as handle:
        handle.write(b"x")
    paths = g.changed_paths(repo)
    assert any(p.startswith("bad-") for p in paths)
