"""``current_branch``, ``branch_tip`` and ``branch_exists`` read HEAD, loose refs and the
object store's files to spare a git process; where a ref is unusual (an alias of another
branch, a symlinked HEAD, a tag object, a missing or corrupt object, a replaced one) they answer
exactly as git does, and the usual case (a plain branch whose commit is loose, or was
seen once) runs no git at all."""

from __future__ import annotations

import os
import subprocess
import zlib
from pathlib import Path

import pytest

from fractal.errors import GitError
from fractal.workspace import git as g
from tests.helpers import asked_git, git


def _git_branch(cwd: Path) -> str | None:
    proc = subprocess.run(["git", "symbolic-ref", "--quiet", "--short", "HEAD"], cwd=cwd,
                          capture_output=True, text=True)
    return proc.stdout.strip() if proc.returncode == 0 else None


def _git_tip(cwd: Path, branch: str) -> str | None:
    proc = subprocess.run(["git", "rev-parse", "--verify", "--quiet", f"{branch}^{{commit}}"],
                          cwd=cwd, capture_output=True, text=True)
    return proc.stdout.strip() if proc.returncode == 0 else None


def _git_exists(cwd: Path, branch: str) -> bool:
    return subprocess.run(["git", "show-ref", "--verify", "--quiet", f"refs/heads/{branch}"],
                          cwd=cwd, capture_output=True).returncode == 0


def _our_tip(cwd: Path, branch: str) -> str | None:
    try:
        return g.branch_tip(cwd, branch)
    except GitError:
        return None


def _linked(repo: Path) -> Path:
    path = repo.parent / "linked"
    git(repo, "worktree", "add", "-q", "-b", "main.child", str(path))
    return path


def _write_ref(repo: Path, branch: str, value: str) -> None:
    ref = repo / ".git" / "refs" / "heads" / branch
    ref.parent.mkdir(parents=True, exist_ok=True)
    ref.write_text(value + "\n")  # as a hand edit or another tool would: git refuses these


def test_a_head_on_an_alias_branch_answers_the_real_branch_as_git(repo: Path) -> None:
    linked = _linked(repo)
    git(repo, "symbolic-ref", "refs/heads/alias", "refs/heads/main.child")
    for place in (repo, linked):
        git(place, "symbolic-ref", "HEAD", "refs/heads/alias")
        assert g.current_branch(place) == _git_branch(place) == "main.child", place
    git(repo, "symbolic-ref", "refs/heads/alias2", "refs/heads/alias")  # an alias of one
    git(repo, "symbolic-ref", "HEAD", "refs/heads/alias2")
    assert g.current_branch(repo) == _git_branch(repo) == "main.child"


def test_a_symlinked_head_answers_as_git(repo: Path) -> None:
    head = repo / ".git" / "HEAD"
    head.unlink()
    head.symlink_to("refs/heads/main")  # how git once wrote HEAD, still read
    assert g.current_branch(repo) == _git_branch(repo) == "main"


def test_a_branch_on_an_annotated_tag_tips_at_its_commit_as_git(repo: Path) -> None:
    git(repo, "tag", "-a", "v1", "-m", "a tag")
    _write_ref(repo, "tagged", git(repo, "rev-parse", "v1"))
    commit = git(repo, "rev-parse", "HEAD")
    assert _our_tip(repo, "tagged") == _git_tip(repo, "tagged") == commit
    assert g.branch_exists(repo, "tagged") == _git_exists(repo, "tagged") is True
    git(repo, "symbolic-ref", "HEAD", "refs/heads/tagged")
    assert g.head_after_commit(repo) == git(repo, "rev-parse", "HEAD^{commit}") == commit


@pytest.mark.parametrize("packed", [False, True], ids=["loose", "packed"])
def test_a_ref_to_a_missing_object_is_no_branch_as_git(repo: Path, packed: bool) -> None:
    if packed:
        git(repo, "gc", "-q")
    head = git(repo, "rev-parse", "HEAD")
    for sha in ("1" * 40, head[:-1] + ("1" if head.endswith("0") else "0")):
        _write_ref(repo, "gone", sha)
        assert g.branch_exists(repo, "gone") == _git_exists(repo, "gone") is False, sha
        assert _our_tip(repo, "gone") == _git_tip(repo, "gone") is None, sha


def _loose_object(repo: Path, sha: str) -> Path:
    return repo / ".git" / "objects" / sha[:2] / sha[2:]


def test_a_ref_to_a_corrupt_or_bogus_commit_tips_as_git(repo: Path) -> None:
    git(repo, "commit", "-q", "--allow-empty", "-m", "second")
    first, second = git(repo, "rev-parse", "HEAD~1"), git(repo, "rev-parse", "HEAD")
    victim = _loose_object(repo, first)
    os.chmod(victim, 0o644)
    victim.write_bytes(_loose_object(repo, second).read_bytes())  # a hash mismatch
    _write_ref(repo, "mismatch", first)
    bogus = subprocess.run(["git", "hash-object", "-w", "-t", "commit", "--literally",
                            "--stdin"], cwd=repo, input="junk\n", capture_output=True,
                           text=True, check=True).stdout.strip()
    _write_ref(repo, "bogus", bogus)
    garbled = repo / ".git" / "objects" / "ab" / ("c" * 38)
    garbled.parent.mkdir(exist_ok=True)
    garbled.write_bytes(zlib.compress(b"commit 5\0") + b"x")
    _write_ref(repo, "garbled", "ab" + "c" * 38)
    for name in ("mismatch", "bogus", "garbled"):
        assert _our_tip(repo, name) == _git_tip(repo, name) is None, name
        assert g.branch_exists(repo, name) == _git_exists(repo, name), name


def test_plain_branches_answer_from_files_loose_or_packed(
        repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    linked = _linked(repo)
    git(linked, "commit", "-q", "--allow-empty", "-m", "loose")
    expected = {name: git(repo, "rev-parse", name) for name in ("main", "main.child")}
    calls = asked_git(monkeypatch)
    for place in (repo, linked):
        for name, sha in expected.items():
            assert g.branch_tip(place, name) == sha
            assert g.branch_exists(place, name)
    assert g.current_branch(linked) == "main.child"
    assert g.head_after_commit(linked) == expected["main.child"]
    assert calls == []
    subprocess.run(["git", "repack", "-adq"], cwd=repo, check=True)  # objects packed,
    assert not list((repo / ".git" / "objects").glob("??/*"))  # refs still loose
    for place in (repo, linked):
        for name, sha in expected.items():
            assert g.branch_tip(place, name) == sha
    assert len(calls) == len(expected)  # git reads the packs: once per tip, then known
    assert all(call[:2] == ["rev-parse", "--verify"] for call in calls)
    calls.clear()
    for place in (repo, linked):
        for name, sha in expected.items():
            assert g.branch_tip(place, name) == sha
            assert g.branch_exists(place, name)
    assert calls == []


@pytest.mark.parametrize("offsets", ["true", "false"], ids=["ofs-delta", "ref-delta"])
def test_every_object_of_a_deltified_pack_tips_as_git(repo: Path, offsets: str) -> None:
    for i in range(12):
        (repo / "notes.txt").write_text("".join(f"line {n}\n" for n in range(i * 3 + 1)))
        git(repo, "add", "notes.txt")
        git(repo, "commit", "-q", "-m", f"commit {i} " + "words " * 20)
    git(repo, "tag", "-a", "v1", "-m", "a tag")
    git(repo, "-c", f"repack.useDeltaBaseOffset={offsets}", "repack", "-adfq", "--depth=50",
        "--window=250")
    pack = next((repo / ".git" / "objects" / "pack").glob("*.idx"))
    rows = [line.split() for line in git(repo, "verify-pack", "-v", str(pack)).splitlines()
            if len(line.split()) >= 5 and len(line.split()[0]) == 40]
    assert any(row[1] == "commit" and len(row) == 7 for row in rows)  # a commit delta
    for sha, kind, *_ in rows:
        _write_ref(repo, "any", sha)
        assert _our_tip(repo, "any") == _git_tip(repo, "any"), (sha, kind)
        assert g.branch_exists(repo, "any") == _git_exists(repo, "any"), (sha, kind)


def test_a_yes_is_not_kept_past_its_object(repo: Path) -> None:
    git(repo, "commit", "-q", "--allow-empty", "-m", "loose")
    sha = git(repo, "rev-parse", "HEAD")
    _write_ref(repo, "copy", sha)
    assert g.branch_exists(repo, "copy") == _git_exists(repo, "copy") is True
    _loose_object(repo, sha).unlink()  # by hand: gc never removes a reachable tip
    assert g.branch_exists(repo, "copy") == _git_exists(repo, "copy") is False
    assert _our_tip(repo, "copy") == _git_tip(repo, "copy") is None


@pytest.mark.parametrize("packed", [False, True], ids=["loose", "packed"])
def test_a_replaced_commit_tips_as_git(repo: Path, packed: bool) -> None:
    first = git(repo, "rev-parse", "HEAD")
    git(repo, "commit", "-q", "--allow-empty", "-m", "second")
    git(repo, "tag", "-a", "v2", "-m", "a tag")
    git(repo, "branch", "old", first)
    git(repo, "replace", "-f", first, git(repo, "rev-parse", "v2"))  # a tag in its place
    if packed:
        git(repo, "pack-refs", "--all")
        empty = repo / ".git" / "refs" / "replace"
        if empty.is_dir():
            empty.rmdir()  # (git leaves it, empty): only packed-refs names the replacement
        _write_ref(repo, "old", first)  # the branch loose again, its replacement packed
    assert _our_tip(repo, "old") == _git_tip(repo, "old") is None
    assert g.branch_exists(repo, "old") == _git_exists(repo, "old")
