"""workspace/rescue.py on real git: a rescue ref holds the tip plus every unsaved file,
and writing it touches neither the worktree, nor the index, nor HEAD."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest

from fractal.errors import FractalError
from fractal.workspace.rescue import (
    RESCUE_PREFIX,
    list_rescue_refs,
    rescue,
    rescue_branch,
    restore_branch,
    stamp_of,
)
from fractal.workspace.worktrees import add_worktree
from tests.helpers import git

INSTANT = datetime(2026, 12, 1, 10, 15, 3, 123456, tzinfo=UTC)


def _state(wt: Path) -> tuple[str, str, str, str]:
    """HEAD, the real index's staged diff, the porcelain status, the index file bytes."""
    index = Path(git(wt, "rev-parse", "--path-format=absolute", "--git-path", "index"))
    return (git(wt, "rev-parse", "HEAD"), git(wt, "diff", "--cached", "--name-status"),
            git(wt, "status", "--porcelain=v1", "--untracked-files=all"),
            index.read_bytes().hex() if index.exists() else "")


def _show(wt: Path, ref: str, path: str) -> str:
    return git(wt, "show", f"{ref}:{path}")


def _paths(wt: Path, ref: str) -> set[str]:
    return set(git(wt, "ls-tree", "-r", "--name-only", ref).splitlines())


@pytest.fixture
def node(repo: Path) -> Path:
    """A node worktree ``main.a`` with two committed files."""
    wt = repo / ".worktrees" / "main.a"
    add_worktree(repo, "main.a", wt, "main")
    (wt / "keep.txt").write_text("kept\n")
    (wt / "gone.txt").write_text("to be deleted\n")
    (repo / ".git" / "info").mkdir(exist_ok=True)
    (repo / ".git" / "info" / "exclude").write_text("/.worktrees/\n*.log\n")
    git(wt, "add", "keep.txt", "gone.txt")
    git(wt, "commit", "-q", "-m", "two files")
    return wt


def test_every_kind_of_unsaved_file_is_restorable_and_nothing_is_touched(node: Path) -> None:
    (node / "keep.txt").write_text("modified, not staged\n")
    (node / "staged.txt").write_text("staged new file\n")
    git(node, "add", "staged.txt")
    (node / "gone.txt").unlink()
    (node / "new dir").mkdir()
    (node / "new dir" / "with spaces.txt").write_text("untracked, spaced\n")
    (node / "pane.log").write_text("ignored\n")
    before = _state(node)
    tip = git(node, "rev-parse", "HEAD")

    saved = rescue(node, "main.a", "delete", instant=INSTANT)

    assert _state(node) == before  # worktree, real index and HEAD untouched
    assert saved.ref == f"{RESCUE_PREFIX}main.a/20261201T101503.123Z"
    assert git(node, "rev-parse", saved.ref) == saved.sha
    assert saved.tip == tip
    assert git(node, "rev-parse", f"{saved.ref}^") == tip
    assert _show(node, saved.ref, "keep.txt") == "modified, not staged"
    assert _show(node, saved.ref, "staged.txt") == "staged new file"
    assert _show(node, saved.ref, "new dir/with spaces.txt") == "untracked, spaced"
    paths = _paths(node, saved.ref)
    assert "gone.txt" not in paths and "pane.log" not in paths
    assert set(saved.files) == {"keep.txt", "staged.txt", "gone.txt", "new dir/with spaces.txt"}
    assert "4 unsaved file(s)" in git(node, "log", "-1", "--format=%B", saved.ref)


def test_a_clean_worktree_still_gets_the_tip(node: Path) -> None:
    saved = rescue(node, "main.a", "retire", instant=INSTANT)
    assert saved.files == ()
    assert git(node, "rev-parse", f"{saved.ref}^{{tree}}") == git(node, "rev-parse",
                                                                  "HEAD^{tree}")


def test_restore_branch_brings_the_files_back(node: Path, repo: Path) -> None:
    (node / "untracked.txt").write_text("only here\n")
    saved = rescue(node, "main.a", "delete", instant=INSTANT)
    sha = restore_branch(repo, saved.ref[len(RESCUE_PREFIX):], "main.back")
    assert sha == saved.sha
    assert git(repo, "show", "main.back:untracked.txt") == "only here"
    with pytest.raises(FractalError, match="already exists"):
        restore_branch(repo, saved.ref, "main.back")
    with pytest.raises(FractalError, match="no rescue ref"):
        restore_branch(repo, "main.a/nope", "main.other")


def test_two_rescues_in_one_millisecond_get_two_refs(node: Path, repo: Path) -> None:
    first = rescue(node, "main.a", "delete", instant=INSTANT)
    second = rescue_branch(repo, "main.a", "delete", instant=INSTANT)
    assert first.ref != second.ref and second.ref.endswith("-2")
    listed = list_rescue_refs(repo)
    assert [r.ref for r in listed] == [first.ref, second.ref]
    assert listed[0].branch == "main.a" and listed[0].subject == "rescue main.a before delete"
    assert list_rescue_refs(repo, "main.b") == []


def test_a_mid_merge_worktree_is_saved_with_its_markers(node: Path, repo: Path) -> None:
    (repo / "README.md").write_text("root side\n")
    git(repo, "commit", "-qam", "root edit")
    (node / "README.md").write_text("node side\n")
    git(node, "commit", "-qam", "node edit")
    proc = subprocess.run(["git", "merge", "-q", "main"], cwd=node,
                                        capture_output=True, text=True, check=False)
    assert proc.returncode != 0  # a conflict: unmerged index entries
    before = _state(node)
    saved = rescue(node, "main.a", "merge restore", instant=INSTANT)
    assert _state(node) == before
    assert "<<<<<<<" in _show(node, saved.ref, "README.md")


def test_the_root_checkout_and_a_missing_worktree(repo: Path) -> None:
    (repo / "notes.txt").write_text("root's own unsaved file\n")
    saved = rescue(repo, "main", "destroy", instant=INSTANT)
    assert saved.files == ("notes.txt",)
    with pytest.raises(FractalError, match="does not exist"):
        rescue(repo / "nowhere", "main", "delete")


def test_stamp_is_ref_safe_and_sorts_in_time() -> None:
    assert stamp_of(INSTANT) == "20261201T101503.123Z"
    assert stamp_of(datetime(2026, 12, 1, 10, 15, 3)) == "20261201T101503.000Z"
    assert stamp_of(datetime(2027, 1, 1, tzinfo=UTC)) > stamp_of(INSTANT)


def test_a_signing_policy_never_blocks_a_rescue(node: Path, repo: Path) -> None:
    git(repo, "config", "commit.gpgsign", "true")
    git(repo, "config", "gpg.program", "false")  # any signing attempt would fail
    (node / "x.txt").write_text("x\n")
    saved = rescue(node, "main.a", "delete", instant=INSTANT)
    assert _show(node, saved.ref, "x.txt") == "x"


@pytest.mark.parametrize(("subject", "operation"), [
    ("rescue main.a before delete", "delete"),
    ("rescue main.a before continue --clean", "continue --clean"),
    ("rescue main before merge restore", "merge restore"),
    ("a commit of its own", None),
])
def test_the_operation_a_rescue_subject_names_survives_its_row(subject: str,
                                                               operation: str | None) -> None:
    """After ``destroy`` only the ref's subject says what made the rescue: a verb of two
    words included."""
    from fractal.workspace.rescue import operation_of

    assert operation_of(subject) == operation


def test_rescue_list_after_destroy_names_a_continue_clean_rescue(repo: Path) -> None:
    from fractal.lifecycle.rescuing import list_rescues

    (repo / "notes.txt").write_text("unsaved\n")
    rescue(repo, "main", "continue --clean", instant=INSTANT)
    assert [r.operation for r in list_rescues(repo)] == ["continue --clean"]
