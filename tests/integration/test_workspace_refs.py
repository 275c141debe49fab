"""The git-dir reads that answer ``current_branch`` and ``branch_exists`` without a git
process agree with git itself: main checkout and linked worktree, detached HEAD, packed,
loose and missing refs, and the cases that must still ask git. Also where git's discovery
or validation would answer otherwise (a ceiling on the way up, a mount point, a ``.git``
directory git does not take for a repository) and through packing, gc and recreation."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fractal.errors import GitError
from fractal.workspace import git as g
from fractal.workspace.discovery import checkout_and_main
from tests.helpers import asked_git, git


def _worktree(repo: Path, branch: str) -> Path:
    path = repo.parent / f"wt-{branch}"
    git(repo, "worktree", "add", "-q", "-b", branch, str(path))
    return path


def test_branch_and_refs_of_main_and_linked_worktrees_without_git(
        repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    linked = _worktree(repo, "main.child")
    calls = asked_git(monkeypatch)
    assert g.current_branch(repo) == "main"
    assert g.current_branch(linked) == "main.child"
    assert g.branch_exists(linked, "main") and g.branch_exists(repo, "main.child")
    assert calls == []


def test_detached_head_reads_none(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    git(repo, "checkout", "-q", "--detach")
    calls = asked_git(monkeypatch)
    assert g.current_branch(repo) is None
    assert calls == []


def test_packed_and_missing_refs_ask_git(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    git(repo, "branch", "other")
    git(repo, "pack-refs", "--all")
    calls = asked_git(monkeypatch)
    assert g.branch_exists(repo, "other")
    assert not g.branch_exists(repo, "gone")
    assert not g.branch_exists(repo, "/etc/hostname")
    assert len(calls) == 3


def test_a_subdirectory_or_a_relocated_git_dir_asks_git(
        repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sub = repo / "sub"
    sub.mkdir()
    calls = asked_git(monkeypatch)
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


def long_way(cwd: Path) -> tuple[Path, Path] | str:
    """(toplevel, repo_root) asked the long way, or the GitError's message."""
    try:
        top = g.toplevel(cwd)
        return top, g.repo_root(top)
    except GitError as exc:
        return str(exc)


def one_way(cwd: Path) -> tuple[Path, Path] | str:
    try:
        return checkout_and_main(cwd)
    except GitError as exc:
        return str(exc)


def test_checkout_and_main_agrees_with_toplevel_and_repo_root_in_one_git_process(
        repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    linked = _worktree(repo, "main.child")
    for place in (repo, linked):
        (place / "sub" / "deeper").mkdir(parents=True)
    (repo / "link").symlink_to(linked / "sub")
    places = [repo, repo / "sub" / "deeper", linked, linked / "sub", repo / "link"]
    expected = [long_way(place) for place in places]
    calls = asked_git(monkeypatch)
    assert [checkout_and_main(place) for place in places] == expected
    assert calls == [["worktree", "list", "--porcelain"]] * len(places)
    assert expected[4] == (linked.resolve(), repo.resolve())


def test_checkout_and_main_asks_git_the_long_way_where_files_cannot_tell(
        tmp_path: Path, repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bare = tmp_path / "bare.git"
    git(tmp_path, "clone", "-q", "--bare", str(repo), str(bare))
    of_bare = tmp_path / "of-bare"
    git(bare, "worktree", "add", "-q", str(of_bare), "main")
    elsewhere = tmp_path / "moved"
    git(repo, "worktree", "add", "-q", "-b", "main.gone", str(elsewhere))
    elsewhere.rename(tmp_path / "moved-by-hand")  # git's record still names the old place
    places = [tmp_path / "nothing", repo / ".git", repo / ".git" / "refs", of_bare,
              tmp_path / "moved-by-hand"]
    (tmp_path / "nothing").mkdir()
    for place in places:
        assert one_way(place) == long_way(place), place
    assert "bare" in str(one_way(of_bare))
    git(repo, "config", "core.worktree", str(repo))
    assert one_way(repo) == long_way(repo)
    git(repo, "config", "--unset", "core.worktree")
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "core.bare")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", "true")  # the list then says bare
    assert one_way(repo) == long_way(repo)
    assert "bare" in str(one_way(repo))


def test_per_worktree_git_paths_and_a_missing_unpacked_branch_without_git(
        repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    linked = _worktree(repo, "main.child")
    names = ["MERGE_HEAD", "rebase-merge", "rebase-apply", "CHERRY_PICK_HEAD", "REVERT_HEAD",
             "index", "index.lock", "fractal-commit.lock"]
    expected = {
        place: tuple(Path(line) for line in git(
            place, "rev-parse", "--path-format=absolute",
            *[arg for name in names for arg in ("--git-path", name)]).splitlines())
        for place in (repo, linked)}
    calls = asked_git(monkeypatch)
    for place in (repo, linked):
        assert g.git_paths(place, names) == expected[place]
    assert not g.branch_exists(repo, "main.nope") and not g.branch_exists(linked, "x/y")
    assert calls == []
    monkeypatch.setenv("GIT_INDEX_FILE", str(repo / "elsewhere"))
    assert g.git_paths(repo, ["index"]) == ((repo / "elsewhere").resolve(),)
    monkeypatch.delenv("GIT_INDEX_FILE")
    calls.clear()
    assert g.git_paths(repo, ["config"]) == ((repo / ".git" / "config").resolve(),)
    git(repo, "pack-refs", "--all")
    assert not g.branch_exists(repo, "main.nope")
    assert len(calls) == 2  # a shared name, and a missing ref while refs are packed


def test_tracked_changes_leaves_out_what_ls_files_calls_untracked(repo: Path) -> None:
    (repo / "kept.txt").write_text("k\n")
    (repo / "moved.txt").write_text("m\n")
    git(repo, "add", "kept.txt", "moved.txt")
    git(repo, "commit", "-q", "-m", "two")
    (repo / "README.md").write_text("edited\n")
    git(repo, "mv", "moved.txt", "?? odd name")
    (repo / "new dir").mkdir()
    (repo / "new dir" / "a.txt").write_text("a\n")
    (repo / "kept.txt").unlink()
    untracked = set(git(repo, "ls-files", "-z", "--others", "--exclude-standard").split("\0"))
    expected = [p for p in g.changed_paths(repo) if p not in untracked]
    assert g.tracked_changes(repo) == expected
    assert sorted(expected) == ["?? odd name", "README.md", "kept.txt", "moved.txt"]


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
