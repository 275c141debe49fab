"""Adoption of a node's private git objects into the shared store
(``fractal.workspace.adoption``) and fractal's own git reading them meanwhile
(``workspace.gitguard.private_stores``), on real repositories: a commit made with the
sandbox's object variables lands whole, a forged or hostile file never enters, nothing
is followed through a link, a snapshot leaves the private dir as it is."""

from __future__ import annotations

import os
import subprocess
import time
import zlib
from pathlib import Path

import pytest

from fractal.workspace.adoption import adopt, last_whole, reads_whole, set_back
from fractal.workspace.backstop import backstop_commit
from fractal.workspace.git import git_env, run_git
from fractal.workspace.gitguard import private_stores
from tests.helpers import git, make_repo


@pytest.fixture
def node(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(repo, child worktree, its private object dir) of a repository with one child."""
    repo = make_repo(tmp_path / "repo")
    git(repo, "worktree", "add", "-q", "-b", "main.a", str(tmp_path / "wt"))
    private = repo / ".git" / "worktrees" / "wt" / "objects"
    private.mkdir()
    return repo, tmp_path / "wt", private


def _private_commit(wt: Path, private: Path, repo: Path, files: int = 1) -> str:
    env = {**os.environ, "GIT_OBJECT_DIRECTORY": str(private),
           "GIT_ALTERNATE_OBJECT_DIRECTORIES": str(repo / ".git" / "objects")}
    for number in range(files):
        (wt / f"file{number}.txt").write_text(f"content {number} {time.time_ns()}\n")
    for args in (["add", "-A"], ["commit", "-q", "-m", "private work"],
                 ["rev-parse", "HEAD"]):
        done = subprocess.run(["git", *args], cwd=wt, env=env, capture_output=True,
                              text=True, check=True)
    return done.stdout.strip()


def _readable(repo: Path, rev: str) -> bool:
    return subprocess.run(["git", "rev-list", "--objects", "--quiet", rev], cwd=repo,
                          env={**os.environ, "GIT_ALTERNATE_OBJECT_DIRECTORIES": ""},
                          capture_output=True, check=False).returncode == 0


def test_a_private_commit_is_adopted_whole_and_the_dir_emptied(
        node: tuple[Path, Path, Path]) -> None:
    repo, wt, private = node
    sha = _private_commit(wt, private, repo, files=10)
    assert not _readable(repo, sha)  # only in the private dir so far
    done = adopt(private, repo / ".git", drain=True)
    assert done.refused == () and done.adopted == 12  # 10 blobs, a tree, a commit
    assert _readable(repo, sha)
    assert os.listdir(private) == []
    assert adopt(private, repo / ".git", drain=True) == (0, ())  # nothing: no work


def test_a_snapshot_leaves_the_private_dir_as_it_is(node: tuple[Path, Path, Path]) -> None:
    repo, wt, private = node
    sha = _private_commit(wt, private, repo)
    before = sorted(p.relative_to(private) for p in private.rglob("*"))
    assert adopt(private, repo / ".git", drain=False).adopted == 3
    assert _readable(repo, sha)
    assert sorted(p.relative_to(private) for p in private.rglob("*")) == before


def test_a_private_pack_is_indexed_into_the_shared_store(
        node: tuple[Path, Path, Path]) -> None:
    repo, wt, private = node
    sha = _private_commit(wt, private, repo)
    subprocess.run(["git", "repack", "-d", "-q", "-l"], cwd=wt, check=True, env={
        **os.environ, "GIT_OBJECT_DIRECTORY": str(private),
        "GIT_ALTERNATE_OBJECT_DIRECTORIES": str(repo / ".git" / "objects")})
    assert list((private / "pack").glob("*.pack"))
    done = adopt(private, repo / ".git", drain=True)
    assert done == (1, ())
    assert _readable(repo, sha)


def test_a_garbage_pack_is_refused(node: tuple[Path, Path, Path]) -> None:
    repo, _wt, private = node
    (private / "pack").mkdir()
    (private / "pack" / "pack-1.pack").write_bytes(b"PACK garbage")
    (private / "pack" / "pack-1.idx").write_bytes(b"")
    packs = sorted((repo / ".git" / "objects" / "pack").glob("*"))
    done = adopt(private, repo / ".git", drain=True)
    assert done.adopted == 0 and "git index-pack refused it" in done.refused[0]
    assert sorted((repo / ".git" / "objects" / "pack").glob("*")) == packs


def test_a_forged_object_is_refused_and_its_branch_set_back(
        node: tuple[Path, Path, Path]) -> None:
    repo, wt, private = node
    good = git(repo, "rev-parse", "main.a")
    sha = _private_commit(wt, private, repo)
    # the commit's own file rewritten with other bytes: it no longer hashes to its name
    path = private / sha[:2] / sha[2:]
    path.chmod(0o644)
    path.write_bytes(zlib.compress(b"blob 6\0forged"))
    done = adopt(private, repo / ".git", drain=True)
    assert done.adopted == 2
    assert done.refused == (f"{path}: its content does not hash to its name",)
    assert not (repo / ".git" / "objects" / sha[:2] / sha[2:]).exists()
    said = set_back(wt, repo / ".git", "main.a", good)
    assert said.startswith("refs/heads/main.a needed objects the shared store refused")
    assert git(repo, "rev-parse", "main.a") == good
    assert (wt / "file0.txt").is_file()  # the work stays, for the next commit
    assert set_back(wt, repo / ".git", "main.a", good) == ""  # whole again: nothing to do


def test_nothing_is_followed_through_a_link(node: tuple[Path, Path, Path],
                                            tmp_path: Path) -> None:
    repo, _wt, private = node
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "ab").mkdir(parents=True)
    kept = elsewhere / "ab" / ("cd" * 19)
    kept.write_bytes(b"someone else's file")
    (private / "ab").symlink_to(elsewhere / "ab")
    (private / "ef").mkdir()
    os.mkfifo(private / "ef" / ("01" * 19))  # never blocks the supervisor
    (private / "ef" / ("23" * 19)).symlink_to(kept)
    done = adopt(private, repo / ".git", drain=True)
    assert done.adopted == 0
    assert sorted(r.split(": ", 1)[1] for r in done.refused) == [
        "cannot be read (Too many levels of symbolic links)", "not a regular file"]
    assert kept.read_bytes() == b"someone else's file"  # the link was removed, not followed
    assert os.listdir(private) == []
    # a link in the private dir's own place is never adopted from nor emptied
    os.rmdir(private)
    private.symlink_to(elsewhere)
    assert adopt(private, repo / ".git", drain=True) == (0, ())
    assert kept.is_file()


def test_a_read_for_display_reads_a_tip_only_a_private_dir_holds(
        node: tuple[Path, Path, Path]) -> None:
    repo, wt, private = node
    sha = _private_commit(wt, private, repo)
    assert private_stores(repo) == [str(private)]
    assert run_git(["log", "--format=%s", "-1", "main.a"], repo,
                   live=True).stdout.strip() == "private work"
    # any other git of fractal's reads the shared store alone
    assert run_git(["cat-file", "-e", sha], repo, check=False).returncode != 0
    adopt(private, repo / ".git", drain=True)
    assert private_stores(wt) == []  # empty again: git gets no extra alternate
    assert run_git(["rev-parse", "main.a"], repo).stdout.strip() == sha


def test_only_a_read_for_display_gets_the_private_dirs_as_alternates(
        node: tuple[Path, Path, Path]) -> None:
    repo, wt, private = node
    _private_commit(wt, private, repo)
    named = git_env(cwd=wt, live=True)["GIT_ALTERNATE_OBJECT_DIRECTORIES"]
    assert [Path(p).resolve() for p in named.split(os.pathsep)] == [private.resolve()]
    for cwd in (repo, wt):  # what every write (and any other read) runs with
        assert "GIT_ALTERNATE_OBJECT_DIRECTORIES" not in git_env(cwd=cwd)


def test_a_write_never_takes_a_forged_object_an_alternate_names(
        node: tuple[Path, Path, Path], tmp_path: Path) -> None:
    """Git skips writing an object an alternate already names: with the private dirs as
    alternates, a backstop commit of the main checkout would reference a sibling's forged
    file instead of its own blob, and break once adoption refuses that file."""
    repo, _wt, private = node
    content = b"the root's own work\n"
    blob = subprocess.run(["git", "hash-object", "--stdin"], input=content, cwd=repo,
                          capture_output=True, check=True).stdout.decode().strip()
    forged = private / blob[:2] / blob[2:]
    forged.parent.mkdir()
    forged.write_bytes(zlib.compress(b"blob 6\0forged"))
    (repo / "work.txt").write_bytes(content)
    sha = backstop_commit(repo, subject="auto: backstop", body="")
    assert sha is not None
    assert _readable(repo, sha)  # the blob entered the shared store: the commit is whole
    assert run_git(["cat-file", "blob", f"{sha}:work.txt"], repo).stdout.encode() == content
    assert adopt(private, repo / ".git", drain=True).refused  # the forged file goes
    assert _readable(repo, sha)


def test_a_branch_set_back_without_a_pre_launch_tip_takes_its_last_whole_commit(
        node: tuple[Path, Path, Path]) -> None:
    """A supervisor's start after a crash mid-launch knows no tip before the launch: the
    branch's reflog gives the candidates, the newest whole one wins."""
    repo, wt, private = node
    good = git(repo, "rev-parse", "main.a")
    sha = _private_commit(wt, private, repo)
    path = private / sha[:2] / sha[2:]
    path.chmod(0o644)
    path.write_bytes(zlib.compress(b"blob 6\0forged"))
    assert last_whole(repo / ".git", "main.a") == good
    assert adopt(private, repo / ".git", drain=True).refused
    said = set_back(wt, repo / ".git", "main.a", None)
    assert said.endswith(f"set back to {good[:10]} (its last whole commit in its reflog); "
                         "the worktree keeps the files")
    assert git(repo, "rev-parse", "main.a") == good
    assert reads_whole(repo / ".git", "refs/heads/main.a")
