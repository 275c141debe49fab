"""nodelinks.py: a link under ``.fractal/`` is never committed and never followed."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from fractal.workspace.commit_stage import stage
from fractal.workspace.nodedir import seed_node_dir
from fractal.workspace.nodelinks import (
    drop_node_links,
    drop_staged_links,
    real_dirs,
    real_node_dir,
)
from tests.helpers import git


def _stage_link(repo: Path, rel: str, target: str, mode: str = "120000") -> None:
    """Put a link entry ``rel`` -> ``target`` in the index, as an agent would."""
    blob = subprocess.run(["git", "-C", str(repo), "hash-object", "-w", "--stdin"],
                          input=target, capture_output=True, text=True,
                          check=True).stdout.strip()
    git(repo, "update-index", "--add", "--cacheinfo", f"{mode},{blob},{rel}")


def _links(repo: Path, rev: str | None = None) -> list[str]:
    out = (git(repo, "ls-tree", "-r", rev, "--", ".fractal") if rev
           else git(repo, "ls-files", "--stage", "--", ".fractal"))
    return [line.split("\t")[1] for line in out.splitlines()
            if line.split(" ", 1)[0] in ("120000", "160000")]


@pytest.mark.parametrize("place", ["missing", "real", "link", "file", "dangling"])
def test_real_dirs_makes_each_component_a_real_directory(tmp_path: Path, place: str) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    top = tmp_path / "wt"
    (top / ".fractal").mkdir(parents=True)
    node = top / ".fractal" / "main.a"
    if place == "real":
        node.mkdir()
        (node / "kept.txt").write_text("kept")
    elif place == "link":
        node.symlink_to(outside)
    elif place == "file":
        node.write_text("a file")
    elif place == "dangling":
        node.symlink_to(tmp_path / "nowhere")
    assert real_dirs(top, ".fractal/main.a/steps") == node / "steps"
    assert not node.is_symlink() and node.is_dir() and (node / "steps").is_dir()
    assert (node / "kept.txt").exists() == (place == "real")
    assert list(outside.iterdir()) == []
    assert not (tmp_path / "nowhere").exists()


def test_real_dirs_replaces_a_linked_fractal_dir_and_refuses_a_climb(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    top = tmp_path / "wt"
    top.mkdir()
    (top / ".fractal").symlink_to(outside)
    assert real_node_dir(top / ".fractal" / "main.a").is_dir()
    assert not (top / ".fractal").is_symlink()
    assert list(outside.iterdir()) == []
    with pytest.raises(ValueError):
        real_dirs(top, "../escape")


def test_seed_node_dir_never_writes_through_a_link(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    (outside / "steps").mkdir(parents=True)
    node = tmp_path / "wt" / ".fractal" / "main.a"
    node.mkdir(parents=True)
    (node / "steps").symlink_to(outside / "steps")
    (node / "NODE.md").symlink_to(outside / "secret.md")
    seed_node_dir(node)
    assert not (node / "steps").is_symlink() and sorted(os.listdir(node / "steps"))
    assert not (node / "NODE.md").is_symlink() and (node / "NODE.md").is_file()
    assert sorted(outside.rglob("*")) == [outside / "steps"]


def test_drop_node_links_removes_every_link_entry_and_checked_out_link(
        repo: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (repo / ".fractal" / "main.a").mkdir(parents=True)
    (repo / ".fractal" / "main.a" / "NODE.md").write_text("own")
    git(repo, "add", ".fractal")
    _stage_link(repo, ".fractal/main.a.c", str(outside))
    _stage_link(repo, ".fractal/main.a/steps2", str(outside))
    _stage_link(repo, "docs-link", str(outside))  # outside .fractal: not ours to judge
    git(repo, "commit", "-q", "-m", "links")
    git(repo, "checkout", "-q", "--", ".")
    assert (repo / ".fractal" / "main.a.c").is_symlink()
    dropped = drop_node_links(repo)
    assert sorted(dropped) == [".fractal/main.a.c", ".fractal/main.a/steps2"]
    assert _links(repo) == []
    assert not os.path.lexists(repo / ".fractal" / "main.a.c")
    assert (repo / "docs-link").is_symlink()
    assert (repo / ".fractal" / "main.a" / "NODE.md").read_text() == "own"
    assert outside.is_dir() and list(outside.iterdir()) == []
    assert drop_node_links(repo) == []


@pytest.mark.parametrize("roots", [None, ["src"]])
def test_a_commit_never_records_a_link_under_fractal(repo: Path, tmp_path: Path,
                                                     roots: list[str] | None) -> None:
    # one link made on disk (sandbox off), one staged through the index only
    (repo / ".fractal").mkdir()
    (repo / ".fractal" / "main.a.c").symlink_to(tmp_path)
    _stage_link(repo, ".fractal/main.a.d", "0" * 40, mode="160000")
    (repo / "src").mkdir()
    (repo / "src" / "work.txt").write_text("work\n")
    if roots is not None:
        git(repo, "add", ".fractal/main.a.c")
    assert sorted(stage(repo, roots)) == [".fractal/main.a.c", ".fractal/main.a.d"]
    git(repo, "commit", "-q", "-m", "work")
    assert _links(repo, "HEAD") == []
    assert "src/work.txt" in git(repo, "ls-tree", "-r", "--name-only", "HEAD")
    assert (repo / ".fractal" / "main.a.c").is_symlink()  # the worktree is left alone


def test_drop_staged_links_asks_git_only_when_something_under_fractal_is_staged(
        repo: Path, tmp_path: Path) -> None:
    _stage_link(repo, ".fractal/main.a.c", str(tmp_path))
    assert drop_staged_links(repo, ["work.txt"]) == []  # nothing there staged: not looked at
    assert _links(repo) == [".fractal/main.a.c"]
    assert drop_staged_links(repo, [".fractal/main.a.c"]) == [".fractal/main.a.c"]
    assert _links(repo) == []


def test_a_linked_fractal_dir_itself_is_dropped_and_made_real(repo: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    _stage_link(repo, ".fractal", str(outside))
    git(repo, "commit", "-q", "-m", "link the whole node area")
    git(repo, "checkout", "-q", "--", ".")
    assert (repo / ".fractal").is_symlink()
    assert drop_node_links(repo) == [".fractal"]
    seed_node_dir(real_node_dir(repo / ".fractal" / "main.a"))
    assert not (repo / ".fractal").is_symlink()
    assert (repo / ".fractal" / "main.a" / "NODE.md").is_file()
    assert list(outside.iterdir()) == []
