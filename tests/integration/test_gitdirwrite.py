"""Writing into a node's git dir without following a link the node planted there
(``workspace.gitdirwrite``): the rename-into-place write, the no-follow copy, and the
sweep of links before every git."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fractal.workspace.gitdirwrite import copy_regular, drop_planted_links, replace_file


def test_replace_file_replaces_a_link_and_leaves_its_target(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    link = tmp_path / "MERGE_MSG"
    link.symlink_to(victim)
    replace_file(link, b"merge\n")
    assert victim.read_text() == "precious\n"
    assert not link.is_symlink() and link.read_text() == "merge\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["MERGE_MSG", "victim"]


@pytest.mark.parametrize("kind", ["link", "fifo"])
def test_copy_regular_refuses_what_is_not_a_regular_file(tmp_path: Path, kind: str) -> None:
    src = tmp_path / "index"
    if kind == "link":
        (tmp_path / "secret").write_text("secret\n")
        src.symlink_to(tmp_path / "secret")
    else:
        os.mkfifo(src)
    with pytest.raises(OSError):
        copy_regular(src, tmp_path / "copy")
    assert not (tmp_path / "copy").exists()


def test_copy_regular_never_writes_through_a_link_at_the_copy(tmp_path: Path) -> None:
    (tmp_path / "index").write_bytes(b"DIRC")
    (tmp_path / "victim").write_text("precious\n")
    (tmp_path / "copy").symlink_to(tmp_path / "victim")
    with pytest.raises(FileExistsError):
        copy_regular(tmp_path / "index", tmp_path / "copy")
    assert (tmp_path / "victim").read_text() == "precious\n"


@pytest.mark.parametrize(("place", "dropped"), [
    pytest.param("wt/MERGE_HEAD", True, id="merge-head"),
    pytest.param("wt/MERGE_MSG", True, id="merge-msg"),
    pytest.param("wt/ORIG_HEAD", True, id="orig-head"),
    pytest.param("wt/fractal-commit.lock", False, id="commit-lock-refused-where-opened"),
    pytest.param("wt/logs/HEAD", True, id="worktree-reflog"),
    pytest.param("common/logs/refs/heads/main.a", True, id="branch-reflog"),
    pytest.param("common/logs/refs/heads/feature/x", True, id="nested-branch-reflog"),
    pytest.param("common/logs/refs/heads/feature", True, id="linked-reflog-dir"),
    pytest.param("wt/notes", False, id="a-name-git-never-writes"),
])
def test_drop_planted_links(tmp_path: Path, place: str, dropped: bool) -> None:
    common = tmp_path / "common"
    wt = common / "worktrees" / "main.a"
    (wt / "logs").mkdir(parents=True)
    (common / "logs" / "refs" / "heads").mkdir(parents=True)
    (common / "logs" / "refs" / "heads" / "main").write_text("regular\n")
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    path = tmp_path / place.replace("wt/", "common/worktrees/main.a/", 1)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(victim)
    assert (path in drop_planted_links(wt, common)) is dropped
    assert path.is_symlink() is not dropped
    assert victim.read_text() == "precious\n"
    assert (common / "logs" / "refs" / "heads" / "main").read_text() == "regular\n"


def test_a_linked_logs_dir_is_removed_never_listed_through(tmp_path: Path) -> None:
    """A link at the git dir's ``logs`` itself (a directory git appends reflogs in) is
    removed as a link: nothing in the directory it names is touched, its own links
    included, and git then makes a real ``logs`` again."""
    common = tmp_path / "common"
    wt = common / "worktrees" / "main.a"
    wt.mkdir(parents=True)
    victim = tmp_path / "victim"
    (victim / "sub").mkdir(parents=True)
    (victim / "HEAD").write_text("precious HEAD\n")
    (victim / "alink").symlink_to(victim / "HEAD")
    (victim / "sub" / "blink").symlink_to(victim / "HEAD")
    (wt / "logs").symlink_to(victim)
    removed = drop_planted_links(wt, common)
    assert not (wt / "logs").exists() and not (wt / "logs").is_symlink()
    assert removed == [wt / "logs"]
    assert (victim / "alink").is_symlink() and (victim / "sub" / "blink").is_symlink()
    assert (victim / "HEAD").read_text() == "precious HEAD\n"
