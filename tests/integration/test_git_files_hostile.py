"""Answers read from the git dir's files (no git process) equal git's own where git's
discovery or validation would answer otherwise: a ceiling on the way up, a ``.git``
directory git does not take for a repository."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fractal.workspace import git as g
from tests.helpers import git
from tests.integration.test_workspace_refs import long_way, one_way


def _exists_by_git(cwd: Path, branch: str) -> bool:
    import subprocess

    return subprocess.run(["git", "show-ref", "--verify", "--quiet", f"refs/heads/{branch}"],
                          cwd=cwd, capture_output=True).returncode == 0


@pytest.mark.parametrize("ceiling", ["repo", "parent"])
def test_a_ceiling_directory_stops_discovery_as_it_stops_git(
        repo: Path, monkeypatch: pytest.MonkeyPatch, ceiling: str) -> None:
    deep = repo / "deep" / "er"
    deep.mkdir(parents=True)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES",
                       str(repo.resolve() if ceiling == "repo" else repo.resolve().parent))
    for place in (deep, repo):
        assert one_way(place) == long_way(place), place


def test_a_dot_git_directory_git_does_not_take_answers_as_git(repo: Path) -> None:
    sub = repo / "vendored"
    (sub / ".git").mkdir(parents=True)  # a leftover: HEAD only, no objects or refs
    (sub / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    branch = g.current_branch(repo)
    assert branch is not None
    assert g.branch_exists(sub, branch) == _exists_by_git(sub, branch) is True
    assert g.branch_exists(sub, "main.nope") == _exists_by_git(sub, "main.nope") is False
    assert g.git_dirs(sub) is None
    assert one_way(sub) == long_way(sub)


def test_branch_exists_and_tips_equal_git_through_packing_gc_and_recreation(
        repo: Path) -> None:
    linked = repo.parent / "linked"
    git(repo, "worktree", "add", "-q", "-b", "main.ü/x", str(linked))
    names = ["main.ü/x", "main.ü", "main.ü/x/y", "nope", "nope/deeper"]

    def agree(label: str) -> None:
        for cwd in (repo, linked):
            for name in names:
                assert g.branch_exists(cwd, name) == _exists_by_git(cwd, name), (label, name)
            assert g.branch_tip(cwd, "main.ü/x") == git(cwd, "rev-parse", "main.ü/x")

    agree("loose")
    git(repo, "pack-refs", "--all")
    agree("packed")
    git(linked, "commit", "-q", "--allow-empty", "-m", "after packing")
    assert g.head_after_commit(linked) == git(linked, "rev-parse", "HEAD")
    agree("packed and loose")
    git(repo, "gc", "-q")
    agree("gc")
    git(repo, "branch", "nope")
    agree("made")
    git(repo, "pack-refs", "--all")
    git(repo, "branch", "-D", "nope")
    agree("deleted while packed")
    git(repo, "branch", "nope/deeper")
    agree("a slashed name where one was")


_ACROSS = """
import subprocess, sys
from pathlib import Path
from fractal.errors import GitError
from fractal.workspace import git as g
from fractal.workspace.discovery import checkout_and_main
here = Path(sys.argv[1])
subprocess.run(["mount", "-t", "tmpfs", "none", str(here)], check=True)
def answer(way):
    try:
        return repr(way(here))
    except GitError as exc:
        return "GitError"
one = answer(checkout_and_main)
long = answer(lambda p: (g.toplevel(p), g.repo_root(g.toplevel(p))))
print(one == long, one, long)
"""


def test_a_mount_point_stops_discovery_as_it_stops_git(repo: Path) -> None:
    import shutil
    import subprocess
    import sys

    unshare = shutil.which("unshare")
    if unshare is None or os.geteuid() != 0:
        pytest.skip("needs unshare and root for a private mount")
    mnt = repo / "mnt"
    mnt.mkdir()
    proc = subprocess.run([unshare, "-m", sys.executable, "-c", _ACROSS, str(mnt)],
                          capture_output=True, text=True, timeout=60,
                          env={k: v for k, v in os.environ.items()
                               if k != "GIT_DISCOVERY_ACROSS_FILESYSTEM"})
    if proc.returncode != 0 and "mount" in proc.stderr:
        pytest.skip(f"no private mount here: {proc.stderr.strip()[-200:]}")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("True "), proc.stdout
