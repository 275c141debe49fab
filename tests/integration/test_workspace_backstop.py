"""backstop.py: the loop's forced commit of leftovers (seed: Backstop commits)."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import pytest

from fractal.errors import GitError
from fractal.workspace.backstop import backstop_commit
from fractal.workspace.git import common_dir, head_sha
from fractal.workspace.worktrees import add_worktree, set_identity
from tests.helpers import git


def _tree(cwd: Path) -> set[str]:
    return set(git(cwd, "ls-tree", "-r", "--name-only", "HEAD").splitlines())


def test_nothing_to_commit_returns_none(repo: Path) -> None:
    before = head_sha(repo)
    assert backstop_commit(repo, subject="main: iteration 1.1 (auto)") is None
    (repo / ".fractal" / "main.x").mkdir(parents=True)
    (repo / ".fractal" / "main.x" / "setup.log").write_text("only an artifact\n")
    assert backstop_commit(repo, subject="main: iteration 1.1 (auto)") is None
    assert head_sha(repo) == before


def test_dirty_worktree_commits_subject_body_and_diffstat(repo: Path) -> None:
    (repo / "README.md").write_text("changed\n")
    (repo / "src").mkdir()
    (repo / "src" / "new.py").write_text("print('hi')\n")
    sha = backstop_commit(repo, subject="main: iteration 2.3 (auto)",
                          body="EXECUTE failed (exit 1); never ran: REVIEW, COMMIT")
    assert sha == head_sha(repo)
    message = git(repo, "log", "-1", "--format=%B")
    parts = message.split("\n\n")
    assert parts[0] == "main: iteration 2.3 (auto)"
    assert parts[1] == "EXECUTE failed (exit 1); never ran: REVIEW, COMMIT"
    stat = parts[2].splitlines()
    assert stat[0].strip().startswith("README.md")
    assert stat[1].strip().startswith("src/new.py")
    assert "2 files changed" in stat[-1]
    assert git(repo, "status", "--porcelain") == ""


def test_body_is_optional(repo: Path) -> None:
    (repo / "a.txt").write_text("a\n")
    backstop_commit(repo, subject="main: final")
    parts = git(repo, "log", "-1", "--format=%B").split("\n\n")
    assert parts[0] == "main: final"
    assert parts[1].splitlines()[0].strip().startswith("a.txt")


def test_diffstat_capped_at_twenty_lines(repo: Path) -> None:
    for i in range(30):
        (repo / f"file{i:02d}.txt").write_text(f"{i}\n")
    backstop_commit(repo, subject="main: iteration 1.1 (auto)")
    stat = git(repo, "log", "-1", "--format=%B").split("\n\n")[1].splitlines()
    assert len(stat) == 21
    assert stat[0].strip().startswith("file00.txt")
    assert stat[19].strip().startswith("file19.txt")
    assert stat[-1] == "... 10 more files"
    assert len(_tree(repo)) == 31


def test_artifacts_never_committed_even_with_empty_info_exclude(repo: Path) -> None:
    (common_dir(repo) / "info" / "exclude").write_text("")
    node = repo / ".fractal" / "x"
    (node / "tmp" / "err").mkdir(parents=True)
    (node / "setup.log").write_text("log\n")
    (node / "claude.err").write_text("err\n")
    (node / "tmp" / "err" / "1-1-2.err").write_text("e\n")
    (node / "NODE.md").write_text("task\n")
    (repo / "a.db-wal").write_text("wal\n")
    (repo / "a.db").write_text("db\n")
    (repo / ".venv" / "bin").mkdir(parents=True)
    (repo / ".venv" / "bin" / "python").write_text("py\n")
    (repo / "real.txt").write_text("work\n")
    git(repo, "add", "-f", "a.db")  # staged by hand: still must not be committed
    assert backstop_commit(repo, subject="main: iteration 1.1 (auto)")
    assert _tree(repo) == {"README.md", "real.txt", ".fractal/x/NODE.md"}
    assert (node / "setup.log").exists() and (repo / "a.db").exists()


def test_hooks_are_bypassed(repo: Path) -> None:
    hooks = common_dir(repo) / "hooks"
    hooks.mkdir(exist_ok=True)
    for name in ("pre-commit", "commit-msg"):
        hook = hooks / name
        hook.write_text("#!/bin/sh\necho 'hook says no' >&2\nexit 1\n")
        hook.chmod(0o755)
    (repo / "b.txt").write_text("b\n")
    sha = backstop_commit(repo, subject="main: iteration 1.2 (auto)")
    assert sha is not None and "b.txt" in _tree(repo)


def test_linked_worktree_commit_authored_by_branch(tmp_path: Path, repo: Path) -> None:
    wt = repo / ".worktrees" / "main.parser"
    add_worktree(repo, "main.parser", wt, "main")
    set_identity(wt, "main.parser")
    (wt / "p.txt").write_text("p\n")
    sha = backstop_commit(wt, subject="main.parser: iteration 1.1 (auto)")
    assert sha == head_sha(wt) != head_sha(repo)
    assert git(wt, "log", "-1", "--format=%an") == "main.parser"


def _age(path: Path, seconds: float) -> None:
    old = time.time() - seconds
    os.utime(path, (old, old))


@pytest.mark.usefixtures("short_lock_settle")
def test_stale_index_lock_is_removed_and_commit_retried(
        repo: Path, caplog: pytest.LogCaptureFixture) -> None:
    lock = repo / ".git" / "index.lock"
    lock.write_text("")
    _age(lock, 120)
    (repo / "c.txt").write_text("c\n")
    with caplog.at_level(logging.WARNING, logger="fractal.workspace.backstop"):
        sha = backstop_commit(repo, subject="main: iteration 1.3 (auto)")
    assert sha is not None and "c.txt" in _tree(repo)
    assert not lock.exists()
    assert any("stale git lock" in r.getMessage() for r in caplog.records)


@pytest.mark.usefixtures("short_lock_settle")
def test_stale_lock_of_a_linked_worktree(repo: Path) -> None:
    wt = repo / ".worktrees" / "main.w"
    add_worktree(repo, "main.w", wt, "main")
    lock = Path(git(wt, "rev-parse", "--path-format=absolute", "--git-path", "index.lock"))
    assert lock.parent != repo / ".git"
    lock.write_text("")
    _age(lock, 300)
    (wt / "d.txt").write_text("d\n")
    assert backstop_commit(wt, subject="main.w: iteration 1.1 (auto)") is not None
    assert not lock.exists()


@pytest.mark.usefixtures("short_lock_settle")
def test_a_lock_held_by_a_live_git_process_is_respected(repo: Path) -> None:
    import subprocess
    import sys

    from fractal.workspace.commit_types import IndexLocked

    lock = repo / ".git" / "index.lock"
    lock.write_text("")
    (repo / "e.txt").write_text("e\n")
    # A process named git-* whose cwd is the worktree stands in for a live git run.
    fake = repo.parent / "git-holder"
    fake.write_text(f"#!{sys.executable}\nimport time\ntime.sleep(60)\n")
    fake.chmod(0o755)
    holder = subprocess.Popen([str(fake)], cwd=repo)
    try:
        with pytest.raises((GitError, IndexLocked), match=r"index\.lock"):
            backstop_commit(repo, subject="main: iteration 1.4 (auto)")
        assert lock.exists()
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.usefixtures("short_lock_settle")
def test_a_fresh_lock_nobody_holds_is_removed(repo: Path) -> None:
    lock = repo / ".git" / "index.lock"
    lock.write_text("")  # an agent (or a killed git) left it a moment ago
    (repo / "f.txt").write_text("f\n")
    assert backstop_commit(repo, subject="main: iteration 1.5 (auto)") is not None
    assert not lock.exists()


def test_a_branch_deleted_behind_its_worktree_gets_no_new_root(tmp_path: Path,
                                                               repo: Path) -> None:
    wt = tmp_path / "wt"
    add_worktree(repo, "main.gone", wt, "main")
    git(repo, "update-ref", "-d", "refs/heads/main.gone")
    (wt / "work.txt").write_text("kept on disk\n")
    with pytest.raises(GitError, match=r"the branch main\.gone is gone; nothing was committed"):
        backstop_commit(wt, subject="main.gone: iteration 1.1 (auto)", branch="main.gone")
    assert git(repo, "branch", "--list", "main.gone") == ""  # no unrelated history begun
    assert (wt / "work.txt").read_text() == "kept on disk\n"
